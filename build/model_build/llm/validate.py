"""Check the served LLM against transformers' reference, calibrate INT8 KV, time ORT vs numpy.

* Reference: transformers' LlamaForCausalLM loaded from the same GGUF (dequantized to FP32), greedy,
  one token at a time with its own KV cache, EOS not special (so every prompt runs the full length).
* Served path: the serving runtime itself (`GenerationEngine`: scheduler with continuous batching,
  chunked prefill and prefix sharing, the paged KV store, the exported graph in ONNX Runtime),
  all prompts submitted at once, so the check covers batching and shared blocks too.
* INT8 KV: the same run with the INT8 store (a scale per head and token), compared with the FP32 store.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from serving.generation.engine import DecoderGraph, GenerationEngine
from serving.generation.kv_store import KvStore
from serving.generation.requests import GenerationRequest, SamplingParams
from serving.generation.scheduler import Scheduler, SchedulerConfig
from serving.generation.sizing import KvLayout


def reference_greedy(hf_model, prompts: Sequence[Sequence[int]], new_tokens: int) -> tuple[list[list[int]], list[np.ndarray]]:
    """(tokens, logits [new_tokens, V]) per prompt from transformers, greedy without EOS stops."""
    import torch

    tokens_out, logits_out = [], []
    with torch.no_grad():
        for prompt in prompts:
            out = hf_model(torch.tensor([list(prompt)]), use_cache=True)
            past, generated, rows = out.past_key_values, [], []
            logits = out.logits[0, -1]
            for _ in range(new_tokens):
                rows.append(logits.numpy().copy())
                token = int(torch.argmax(logits))
                generated.append(token)
                out = hf_model(torch.tensor([[token]]), past_key_values=past, use_cache=True)
                past, logits = out.past_key_values, out.logits[0, -1]
            tokens_out.append(generated)
            logits_out.append(np.stack(rows))
    return tokens_out, logits_out


class _RecordingEngine(GenerationEngine):
    """The served engine, keeping every sampled row of logits (for the tolerance check)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.logits: dict[str, list[np.ndarray]] = {}

    def _sample(self, sequence, logits):
        self.logits.setdefault(sequence.request_id, []).append(np.asarray(logits, dtype=np.float32).copy())
        return super()._sample(sequence, logits)


def served_greedy(graph: DecoderGraph, layout: KvLayout, prompts: Sequence[Sequence[int]], new_tokens: int,
                  max_context: int, max_running: int = 8,
                  chunk: int = 32) -> tuple[list[list[int]], list[np.ndarray], dict[str, Any]]:
    blocks = 2 * max_running * -(-max_context // layout.block_size)
    scheduler = Scheduler(SchedulerConfig(num_blocks=blocks, block_size=layout.block_size, max_running=max_running,
                                          max_context=max_context, prefill_chunk_tokens=chunk, eos_token_ids=()))
    engine = _RecordingEngine(graph, scheduler, KvStore(layout, blocks))
    sequences = [engine.submit(GenerationRequest(f"p{i}", tuple(p), SamplingParams(max_tokens=new_tokens), priority=2))
                 for i, p in enumerate(prompts)]
    started = time.perf_counter()
    steps = engine.run_until_idle()
    seconds = time.perf_counter() - started
    stats = {"steps": len(steps), "seconds": round(seconds, 2), "prefix_hit_rate": round(scheduler.prefix_cache.stats.hit_rate, 4),
             "mean_decode_batch": round(float(np.mean([s.decode_batch for s in steps if s.decode_batch] or [0])), 2),
             "blocks_in_use_after": scheduler.allocator.num_used}
    return [s.generated for s in sequences], [np.stack(engine.logits[s.request_id]) for s in sequences], stats


def compare_runs(reference_tokens, reference_logits, tokens, logits) -> dict[str, Any]:
    """Identical prompts, matching prefix lengths, and logit differences while the tokens agree."""
    identical, prefixes, diffs = 0, [], []
    for ref_t, ref_l, got_t, got_l in zip(reference_tokens, reference_logits, tokens, logits):
        match = next((i for i, (a, b) in enumerate(zip(ref_t, got_t)) if a != b), min(len(ref_t), len(got_t)))
        identical += got_t == ref_t
        prefixes.append(match)
        upto = min(match + 1, len(ref_l), len(got_l))  # the diverging step's logits are comparable too
        diffs.append(float(np.abs(ref_l[:upto] - got_l[:upto]).max()))
    return {"prompts": len(reference_tokens), "identical": identical, "min_matching_prefix": min(prefixes),
            "mean_matching_prefix": round(float(np.mean(prefixes)), 2), "max_abs_logit_diff": max(diffs),
            "mean_max_abs_logit_diff": round(float(np.mean(diffs)), 6)}


def time_ort_vs_numpy(graph: DecoderGraph, numpy_step, layout: KvLayout, batches=(1, 8), past: int = 128, repeats: int = 7) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    rows = []
    for batch in batches:
        keys = rng.standard_normal((layout.layers, batch, layout.kv_heads, past, layout.head_dim)).astype(np.float32)
        values = rng.standard_normal(keys.shape).astype(np.float32)
        tokens = rng.integers(0, 49152, batch)
        lengths = np.full(batch, past, np.int64)

        def ort_call():
            return graph.run(tokens[:, None].astype(np.int64), lengths[:, None], keys, values, lengths, np.zeros(batch, np.int64))[0]

        def numpy_call():
            return numpy_step.decode(tokens, lengths, keys, values, lengths)

        # Interleaved (ORT, numpy, ORT, numpy, ...) and the median of each: the host's load drifts
        # during the build, and both sides should see the same drift.
        samples: dict[str, list[float]] = {"onnxruntime": [], "numpy": []}
        outputs = {"onnxruntime": ort_call(), "numpy": numpy_call()}
        for _ in range(repeats):
            for name, call in (("onnxruntime", ort_call), ("numpy", numpy_call)):
                started = time.perf_counter()
                call()
                samples[name].append((time.perf_counter() - started) * 1000)
        timings = {name: (float(np.median(values)), outputs[name]) for name, values in samples.items()}
        rows.append({"batch": batch, "past": past, "onnxruntime_ms": round(timings["onnxruntime"][0], 1),
                     "numpy_ms": round(timings["numpy"][0], 1),
                     "speedup": round(timings["numpy"][0] / timings["onnxruntime"][0], 2),
                     "max_abs_logit_diff": float(np.abs(timings["onnxruntime"][1] - timings["numpy"][1]).max())})
    return rows


def probe_engine_memory(onnx_path: Path, layout: KvLayout, batch: int, past: int, threads: int = 0) -> int:
    command = [sys.executable, "-m", "serving.generation.memory_probe", "--onnx", str(onnx_path), "--batch", str(batch),
               "--past", str(past), "--layers", str(layout.layers), "--kv-heads", str(layout.kv_heads),
               "--head-dim", str(layout.head_dim), "--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"engine memory probe failed: {done.stderr.strip()[-400:]}")
    return int(json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_growth_bytes"])


def detect_cuda_provider() -> str:
    """'' when onnxruntime's CUDA provider can run here, else why not (one line for the report)."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return (f"onnxruntime {ort.__version__} here has no CUDAExecutionProvider (install onnxruntime-gpu on a GPU host); "
                "the same decoder_step.onnx runs there with provider CUDAExecutionProvider")
    return ""
