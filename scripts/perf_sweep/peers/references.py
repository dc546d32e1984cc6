"""What every target is measured against: the same inputs, in-process reference answers, and the
in-process ONNX Runtime limit of the same files.

Inputs: the digit test split (artifacts/digit_classifier/test_split.npz, seeded order, as
perf_sweep.inputs samples it) and the held-out sentences of artifacts/text_encoder/text_corpus.json
(`heldout`: real, long-tailed documentation sentences never used for calibration; seeded order).

References: the served ONNX files run here in ONNX Runtime, one item at a time (a batch would pad
texts; dynamic INT8 scales would see the padding). The limit reuses perf_sweep.limits and
perf_sweep.text_limit, threads = cores, unpinned, at batch sizes up to the highest concurrency (a
dynamic batcher fed by at most 32 clients never executes more than 32 items); the text limit is
the best of padding each batch to its longest text, the served encoder's own `sequence_buckets`
and the default length buckets (contracts.sequence_buckets), so a ceiling, not a strawman.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from perf_sweep.errors import SweepPlanError
from perf_sweep.peers.served_files import ServedFiles


@dataclass(frozen=True)
class SuiteInputs:
    images: np.ndarray = field(repr=False)  # [N, 1, 8, 8] FP32, seeded order
    texts: tuple[str, ...] = field(repr=False)  # seeded order
    descriptions: dict = field(default_factory=dict)


def load_suite_inputs(artifacts: Path, seed: int = 0, text_count: int | None = None) -> SuiteInputs:
    from perf_sweep import inputs as gen

    split = artifacts / "digit_classifier" / "test_split.npz"
    images = gen.sample_digit_images(gen.load_test_split_images(split), seed=seed)
    corpus_path = artifacts / "text_encoder" / "text_corpus.json"
    try:
        heldout = json.loads(corpus_path.read_text())["heldout"]
    except FileNotFoundError:
        raise SweepPlanError(f"{corpus_path} does not exist: run `make build-engines` first.") from None
    if not heldout:
        raise SweepPlanError(f"{corpus_path} has no `heldout` sentences.")
    texts = seeded_order(heldout, seed)[:text_count or None]
    return SuiteInputs(images, tuple(texts), {
        "digit_classifier": f"{len(images)} images of the held-out test split (`{split.name}`), seed {seed}",
        "text_embedder": f"{len(texts)} held-out sentences of `{corpus_path.name}` (`heldout`), seed {seed}",
    })


def seeded_order(items: Sequence[Any], seed: int) -> list[Any]:
    order = np.random.default_rng(seed).permutation(len(items))
    return [items[i] for i in order]


def token_length_summary(texts: Sequence[str], files: ServedFiles) -> str:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(files.tokenizer_json))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    lengths = np.array([len(tokenizer.encode(t).ids) for t in texts])
    return (f"token lengths P50 {np.percentile(lengths, 50):.0f}, P95 {np.percentile(lengths, 95):.0f}, "
            f"max {lengths.max()}; {np.mean(lengths > files.max_length):.1%} longer than {files.max_length}")


def digit_reference(files: ServedFiles, images: np.ndarray, threads: int) -> tuple[int, ...]:
    """The served digit model's argmax for every image, in this process."""
    from perf_sweep.limits import served_onnx_session

    session = served_onnx_session(files.digits_onnx, threads)
    return tuple(int(np.argmax(session.run(None, {"image": image[None]})[0])) for image in images)


def _served_pipeline(files: ServedFiles, max_batch_size: int, buckets: tuple[int, ...] = ()):
    from perf_sweep.text_limit import TextPipeline

    return TextPipeline(tokenizer_model="text_tokenizer", encoder_model="text_encoder", tokenizer_file=files.tokenizer_json,
                        max_length=files.max_length, encoder_onnx=files.text_onnx,
                        feeds=(("input_ids", "input_ids"), ("attention_mask", "attention_mask")),
                        buckets=buckets, length_input="attention_mask" if buckets else "", max_batch_size=max_batch_size)


def text_reference(files: ServedFiles, texts: Sequence[str], threads: int) -> np.ndarray:
    """The served text encoder's embedding of every text, one at a time, in this process."""
    from perf_sweep.limits import served_onnx_session
    from perf_sweep.text_limit import encoder_feeds, served_tokenizer

    pipeline = _served_pipeline(files, 1)
    tokenizer = served_tokenizer(pipeline)
    session = served_onnx_session(files.text_onnx, threads)
    rows = [session.run(None, encoder_feeds([tokenizer.encode(t)], pipeline.feeds))[0][0] for t in texts]
    return np.asarray(rows, dtype=np.float64)


def measure_limits(files: ServedFiles, inputs: SuiteInputs, threads: int, max_batch: int, seconds_per_batch: float,
                   models: Sequence[str]) -> dict[str, list[dict]]:
    """One measurement of each model's in-process limit: {model: [LimitPoint dicts, with `how`]}."""
    from perf_sweep.limits import limit_batch_sizes, measure_in_process_limit
    from perf_sweep.text_limit import measure_text_limit
    from contracts.sequence_buckets import default_bucket_boundaries

    sizes = limit_batch_sizes(max_batch)
    out: dict[str, list[dict]] = {}
    if "digit_classifier" in models:
        points = measure_in_process_limit(files.digits_onnx, inputs.images, "image", sizes, threads, seconds_per_batch)
        out["digit_classifier"] = [{**p.__dict__, "how": "one ONNX Runtime call per batch"} for p in points]
    if "text_embedder" in models:
        raw = [t.encode("utf-8") for t in inputs.texts]
        rows = []
        for buckets in dict.fromkeys([(), files.served_buckets, default_bucket_boundaries(files.max_length)]):
            how = "length buckets " + ",".join(map(str, buckets)) if buckets else "padded to the batch's longest"
            pipeline = _served_pipeline(files, max_batch, buckets)
            rows += [{**p.__dict__, "how": how}
                     for p in measure_text_limit(pipeline, raw, threads, (), sizes, seconds_per_batch)]
        out["text_embedder"] = rows
    return out


def limit_entry(runs: dict[str, list[dict]], threads: int, description: str, unit: str = "items/s") -> dict[str, Any]:
    """results.json `limits.<model>`: the best point over every run and way (a ceiling), and all of them."""
    every = [p for points in runs.values() for p in points]
    if not every:
        raise SweepPlanError("no in-process limit point was measured.")
    best = max(every, key=lambda p: p["throughput"])
    return {"best": best, "runs": runs, "threads": threads,
            "text": f"{description}; {threads} ONNX Runtime threads, unpinned; measured {len(runs)} time(s) "
                    f"({', '.join(runs)}); the best point of all is kept: {best['throughput']:,.0f} {unit} at batch "
                    f"{best['batch_size']} ({best['how']})."}
