"""Peak resident memory of the generation engine, measured in a fresh process.

`python -m serving.generation.memory_probe --onnx decoder_step.onnx --batch 8 --past 512 --threads 2
--layers 30 --kv-heads 3 --head-dim 64` (SmolLM2-135M's shapes, from its generation.json)
prints one JSON line: the growth of the peak resident set (VmHWM) from before the ONNX Runtime
session is created to after one decode step of `batch` rows over `past` positions (weights,
ONNX Runtime's arena and the step's activations; the KV pool is sized separately, see sizing.py).
"""
from __future__ import annotations

import argparse
import json

from contracts.processes import own_memory_bytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--onnx", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--past", type=int, required=True)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--kv-heads", type=int, required=True)
    parser.add_argument("--head-dim", type=int, required=True)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)
    import numpy as np

    from serving.generation.engine import DecoderGraph

    before = own_memory_bytes("VmHWM")
    graph = DecoderGraph(args.onnx, threads=args.threads)
    past = np.zeros((args.layers, args.batch, args.kv_heads, args.past, args.head_dim), dtype=np.float32)
    graph.run(np.ones((args.batch, 1), np.int64), np.full((args.batch, 1), args.past, np.int64), past, past.copy(),
              np.full(args.batch, args.past, np.int64), np.zeros(args.batch, np.int64))
    inputs = 2 * past.nbytes  # the dense past is the KV working copy, counted in sizing.py: not here
    print(json.dumps({"peak_rss_growth_bytes": own_memory_bytes("VmHWM") - before - inputs, "batch": args.batch, "past": args.past}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
