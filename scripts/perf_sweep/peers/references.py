"""What every target is measured against: the same inputs, in-process reference answers, and the
in-process ONNX Runtime limit of the same files.

Inputs: the digit test split (artifacts/digit_classifier/test_split.npz, seeded order, as
perf_sweep.inputs samples it) and, by default, the held-out sentences of
artifacts/text_encoder/text_corpus.json (`heldout`: real, long-tailed documentation sentences never used
for calibration; seeded order). `TextSource` names the other workloads (`--texts`): whole paragraphs,
`make perf`'s long-tailed texts, or a file of the user's own texts.

References: the served ONNX files run here in ONNX Runtime, one item at a time (a batch would pad
texts; dynamic INT8 scales would see the padding). The limit reuses perf_sweep.limits and
perf_sweep.text_limit, threads = cores, unpinned, at batch sizes up to the highest concurrency (a
dynamic batcher fed by at most 32 clients never executes more than 32 items); the text limit is
the best of padding each batch to its longest text, the served encoder's own `sequence_buckets`
and the default length buckets (contracts.sequence_buckets), so a ceiling, not a strawman.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from perf_sweep.errors import SweepPlanError
from perf_sweep.peers.served_files import ServedFiles

from contracts.digit_split import digit_test_split_path
from contracts.text_corpus import TextCorpusError, load_text_corpus, text_corpus_path
from contracts.token_padding import ATTENTION_MASK_INPUT, INPUT_IDS_INPUT


@dataclass(frozen=True)
class SuiteInputs:
    images: np.ndarray = field(repr=False)  # [N, 1, 8, 8] FP32, seeded order
    texts: tuple[str, ...] = field(repr=False)  # seeded order
    descriptions: dict = field(default_factory=dict)


class TextSource(str, Enum):
    """Where the text workload comes from (`--texts`; a path to a file of your own is the fourth way).

    Each shifts the token-length mix, which decides how much batching and bucketing can win: the
    held-out sentences are short (P50 ~22 tokens), whole paragraphs about twice that (P50 ~41, 6% cut
    at the 128-token truncation), and `make perf`'s long-tailed texts put 6% at the maximum length."""

    HELDOUT = "heldout"  # the build corpus's held-out sentences (never used for calibration)
    PARAGRAPHS = "paragraphs"  # whole prose paragraphs of the installed packages' READMEs, cut at the truncation
    LONG_TAILED = "long_tailed"  # `make perf`'s texts: paragraphs cut to long-tailed token lengths


#: Texts of `TextSource.LONG_TAILED` when --text-count does not say (make perf sends 400).
LONG_TAILED_COUNT = 800


def load_suite_inputs(artifacts: Path, seed: int = 0, text_count: int | None = None,
                      texts: str = TextSource.HELDOUT.value, max_length: int = 128) -> SuiteInputs:
    """The digit test split and the texts of `texts` (a TextSource value or a file), in a seeded order."""
    from perf_sweep import inputs as gen

    split = digit_test_split_path(artifacts)
    images = gen.sample_digit_images(gen.load_test_split_images(split), seed=seed)
    chosen, where = _texts_of(texts, artifacts, seed, text_count, max_length)
    chosen = seeded_order(chosen, seed)[:text_count or None]
    return SuiteInputs(images, tuple(chosen), {
        "digit_classifier": f"{len(images)} images of the held-out test split (`{split.name}`), seed {seed}",
        "text_embedder": f"{len(chosen)} {where}, seed {seed}",
    })


def _texts_of(source: str, artifacts: Path, seed: int, count: int | None, max_length: int) -> tuple[list[str], str]:
    from perf_sweep import inputs as gen

    if source == TextSource.HELDOUT.value:
        corpus_path = text_corpus_path(artifacts / "text_encoder")
        try:
            heldout = load_text_corpus(corpus_path).heldout  # never empty: TextCorpus refuses that
        except TextCorpusError as exc:
            raise SweepPlanError(str(exc)) from None
        return list(heldout), f"held-out sentences of `{corpus_path.name}` (`heldout`)"
    if source == TextSource.PARAGRAPHS.value:
        # Cut where the served tokenizer truncates: infinity-emb reads up to the model's 256 tokens and
        # would otherwise compute (and answer) more than the others for the longest paragraphs.
        tokenizer = gen.minilm_tokenizer()
        paragraphs = [tokenizer.cut(p, max_length) for p in gen.installed_paragraphs()]
        return paragraphs, (f"of {len(paragraphs)} prose paragraphs of the installed packages' READMEs (`paragraphs`), "
                            f"each cut at the served {max_length}-token truncation")
    if source == TextSource.LONG_TAILED.value:
        texts, paragraphs = gen.long_tailed_texts(count or LONG_TAILED_COUNT, max_length, gen.minilm_tokenizer(), seed)
        return texts, (f"texts cut from {paragraphs} README paragraphs to long-tailed token lengths "
                       f"(`long_tailed`, as `make perf` sends)")
    return read_text_file(Path(source)), f"texts of `{source}`"


def read_text_file(path: Path) -> list[str]:
    """Texts of a file of your own: a JSON list of strings, or UTF-8 text with one text per line
    (blank lines skipped)."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SweepPlanError(f"`--texts {path}`: no such file; expected one of "
                             f"{', '.join(s.value for s in TextSource)} or a file of texts.") from None
    except UnicodeDecodeError as e:
        raise SweepPlanError(f"`--texts {path}` is not UTF-8 text ({e.reason} at byte {e.start}).") from None
    if path.suffix == ".json":
        try:
            texts = json.loads(raw)
        except json.JSONDecodeError as e:
            raise SweepPlanError(f"`--texts {path}` is not valid JSON ({e.msg}, line {e.lineno}); "
                                 "expected a list of strings.") from None
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise SweepPlanError(f"`--texts {path}` must hold a JSON list of strings, got {type(texts).__name__}"
                                 + (" with non-string items" if isinstance(texts, list) else "") + ".")
    else:
        texts = raw.splitlines()
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise SweepPlanError(f"`--texts {path}` holds no non-blank text.")
    return texts


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
                        feeds=((INPUT_IDS_INPUT, INPUT_IDS_INPUT), (ATTENTION_MASK_INPUT, ATTENTION_MASK_INPUT)),
                        buckets=buckets, length_input=ATTENTION_MASK_INPUT if buckets else "", max_batch_size=max_batch_size)


def probe_feeds(files: ServedFiles, texts: Sequence[str], tokens: int = 64) -> dict[str, np.ndarray]:
    """The served text file's feeds for one text of `tokens` tokens (the workload's texts joined, then
    truncated; fewer only when they are all shorter together): what machine.ParallelismProbe times,
    the same input at every level."""
    from perf_sweep.text_limit import encoder_feeds, served_tokenizer

    pipeline = replace(_served_pipeline(files, 1), max_length=tokens)
    encoding = served_tokenizer(pipeline).encode(" ".join(texts[:4 * tokens]))
    return encoder_feeds([encoding], pipeline.feeds)


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
