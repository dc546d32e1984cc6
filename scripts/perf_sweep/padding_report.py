"""Padding report: how much of the text encoder's work is padding, before and after bucketing.

`python -m perf_sweep.padding_report [--batch-sizes 8 16 32] [--timing-batches 6]`

Inputs (built by `make build-engines`): the held-out split of the text corpus
(artifacts/text_encoder/text_corpus.json: documentation sentences, a long-tailed length mix) and
the encoder's tokenizer.json and ONNX graph. Requests arrive in a seeded random order and are cut
into dynamic batches of each size; for every batch the same functions the `onnxruntime_cpu`
backend runs (contracts.sequence_buckets) count:

* pad to max length: every text padded to the model's maximum (what a fixed-shape engine does),
* pad to longest: the whole batch padded to its longest text, one call (the backend before),
* bucketed: rows grouped at the configured boundaries, each bucket padded to its own longest
  (the backend now), one call per non-empty bucket.

Padding efficiency = real tokens / (rows x padded length), summed over calls. With
`--timing-batches N > 0` it also times ONNX Runtime on N of those batches, pad-to-longest vs
bucketed, interleaved in ONE run (the machine is shared: only the ratio is meaningful).
Writes reports/serving/padding_report.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from contracts.sequence_buckets import (
    PaddingStats,
    default_bucket_boundaries,
    padding_to_fixed_length,
    padding_to_longest,
    padding_with_buckets,
    run_in_length_buckets,
)

from contracts.layout import ARTIFACTS_DIR, REPORTS_DIR
from contracts.token_padding import ATTENTION_MASK_INPUT
DEFAULT_WORKDIR = ARTIFACTS_DIR / "text_encoder"
DEFAULT_OUT = REPORTS_DIR / "serving"
STRATEGIES = ("pad_to_max_length", "pad_to_longest", "bucketed")


def arrival_batches(count: int, batch_size: int, seed: int) -> list[np.ndarray]:
    """Row indices of consecutive dynamic batches, requests in a seeded random arrival order."""
    order = np.random.default_rng(seed).permutation(count)
    return [order[i:i + batch_size] for i in range(0, count, batch_size)]


def padding_by_strategy(lengths: np.ndarray, batches: Sequence[np.ndarray], max_length: int,
                        boundaries: Sequence[int]) -> dict[str, PaddingStats]:
    """Summed PaddingStats of each strategy over the batches (pure)."""
    totals = {name: PaddingStats(0, 0, 0) for name in STRATEGIES}
    for rows in batches:
        batch = lengths[rows]
        totals["pad_to_max_length"] += padding_to_fixed_length(batch, max_length)
        totals["pad_to_longest"] += padding_to_longest(batch)
        totals["bucketed"] += padding_with_buckets(batch, boundaries)
    return totals


def length_summary(lengths: np.ndarray) -> dict[str, float]:
    return {"count": int(len(lengths)), "p50": float(np.percentile(lengths, 50)), "p90": float(np.percentile(lengths, 90)),
            "p99": float(np.percentile(lengths, 99)), "max": int(lengths.max()), "mean": float(lengths.mean())}


def time_strategies(onnx_path: Path, feeds_per_batch: list[dict[str, np.ndarray]], boundaries: Sequence[int],
                    threads: int, repeats: int) -> dict[str, float]:
    """Seconds per strategy (best of `repeats`, interleaved so load changes hit both alike)."""
    from contracts.onnx_sessions import served_session

    session = served_session(onnx_path, threads)
    run = lambda feeds: session.run(None, feeds)  # noqa: E731
    for feeds in feeds_per_batch[:1]:  # warm up both paths
        run(feeds)
        run_in_length_buckets(run, feeds, ATTENTION_MASK_INPUT, boundaries)
    best = {"pad_to_longest": float("inf"), "bucketed": float("inf")}
    for _ in range(repeats):
        for name in best:
            started = time.perf_counter()
            for feeds in feeds_per_batch:
                if name == "bucketed":
                    run_in_length_buckets(run, feeds, ATTENTION_MASK_INPUT, boundaries)
                else:
                    run(feeds)
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def _padded_feeds(encodings, rows: np.ndarray, pad_id: int) -> dict[str, np.ndarray]:
    from contracts.token_padding import padded_token_tensors

    return padded_token_tensors([encodings[i] for i in rows], pad_id)


def render_markdown(report: dict) -> str:
    mix = report["length_mix"]
    lines = [
        "# Padding efficiency of the text encoder",
        "",
        f"Mix: {mix['count']} held-out documentation sentences, tokens p50 {mix['p50']:.0f}, p90 {mix['p90']:.0f}, "
        f"p99 {mix['p99']:.0f}, max {mix['max']} (truncated at {report['max_length']}). Buckets: "
        f"{report['boundaries']}. Efficiency = real tokens / (rows x padded length).",
        "",
        "| batch size | pad to max length | pad to longest (before) | bucketed (after) | calls/batch before | calls/batch after |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["by_batch_size"]:
        s = row["strategies"]
        lines.append(
            f"| {row['batch_size']} | {s['pad_to_max_length']['efficiency']:.1%} | {s['pad_to_longest']['efficiency']:.1%} | "
            f"{s['bucketed']['efficiency']:.1%} | {s['pad_to_longest']['calls_per_batch']:.2f} | {s['bucketed']['calls_per_batch']:.2f} |"
        )
    if report.get("timing"):
        t = report["timing"]
        lines += ["", f"ONNX Runtime ({t['threads']} threads, {t['batches']} batches of {t['batch_size']}, best of "
                  f"{t['repeats']}, one run): pad to longest {t['seconds']['pad_to_longest']:.3f} s, bucketed "
                  f"{t['seconds']['bucketed']:.3f} s: speed-up {t['speedup']:.2f}x."]
    lines += ["", f"Command: `{report['command']}`"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perf_sweep.padding_report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="the text encoder's build directory")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timing-batches", type=int, default=6, help="batches to time in ONNX Runtime (0: skip)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    from tokenizers import Tokenizer  # lazy: only this tool needs it

    from contracts.build_record import BuildRecordError, read_build_record
    from contracts.text_corpus import TextCorpusError, load_text_corpus

    try:
        record = read_build_record(args.workdir).data
        texts = list(load_text_corpus(args.workdir / record["corpus"]["file"]).heldout)
    except (BuildRecordError, TextCorpusError) as exc:
        print(f"padding_report: error: {exc}", file=sys.stderr)
        return 1
    max_length = int(record["max_length"])
    boundaries = default_bucket_boundaries(max_length)
    tokenizer = Tokenizer.from_file(str(args.workdir / "tokenizer.json"))  # truncates at max_length
    encodings = tokenizer.encode_batch(texts)
    lengths = np.array([len(e.ids) for e in encodings], np.int64)

    report = {"max_length": max_length, "boundaries": list(boundaries), "seed": args.seed,
              "length_mix": length_summary(lengths), "by_batch_size": [],
              "command": "python -m perf_sweep.padding_report " + " ".join(argv if argv is not None else sys.argv[1:])}
    for size in args.batch_sizes:
        batches = arrival_batches(len(lengths), size, args.seed)
        totals = padding_by_strategy(lengths, batches, max_length, boundaries)
        report["by_batch_size"].append({"batch_size": size, "batches": len(batches), "strategies": {
            name: {"real_tokens": s.real_tokens, "computed_tokens": s.computed_tokens, "efficiency": s.efficiency,
                   "calls_per_batch": s.framework_calls / len(batches)} for name, s in totals.items()}})
    if args.timing_batches > 0:
        size = max(args.batch_sizes)
        batches = [b for b in arrival_batches(len(lengths), size, args.seed) if len(b) == size][:args.timing_batches]
        feeds = [_padded_feeds(encodings, rows, int(record.get("pad_token_id", 0))) for rows in batches]
        seconds = time_strategies(args.workdir / record["served_file"], feeds, boundaries, args.threads, args.repeats)
        report["timing"] = {"threads": args.threads, "batches": len(feeds), "batch_size": size, "repeats": args.repeats,
                            "seconds": seconds, "speedup": seconds["pad_to_longest"] / seconds["bucketed"]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "padding_report.json").write_text(json.dumps(report, indent=2))
    markdown = render_markdown(report)
    (args.out / "padding_report.md").write_text(markdown)
    print(markdown, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
