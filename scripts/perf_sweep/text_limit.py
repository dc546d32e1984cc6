"""The text embedder's in-process limit: tokenize + encode, end to end, exactly as served.

The served `text_embedder` tokenizes and encodes in one `onnxruntime_cpu` execution (the backend's
text front-end; `plan_fused_text_pipeline`). The ensemble form (`plan_text_pipeline`) is the
Python `text_tokenizer` (tokenizers'
`encode_batch`, truncation at `max_length`) feeds the ONNX `text_encoder`, whose `onnxruntime_cpu`
backend right-pads the batch's rows with `pad_value` and, when `sequence_buckets` is set, runs one
ONNX Runtime call per length bucket (contracts.sequence_buckets). perf_analyzer sends one text per
request, so all cross-row padding is the encoder backend's.

The limit does the same work on the same texts in this process: every setting is read from the
SERVED configs (Triton's config API: the ensemble's steps, the tokenizer's `max_length` and
`tokenizer_file`, the encoder's `onnx_file`, `pad_value`, `sequence_buckets`,
`sequence_length_input`, `max_batch_size`) and the files come from the served model repository,
so the comparison is apples to apples. Batches are consecutive slices of the swept texts (what a
dynamic batcher forms from requests arriving in perf_analyzer's order); each batch size is timed
over whole passes, so each sees the same length mix.

`plan_text_pipeline`, `cycle_batches`, `pad_rows`, `encoder_feeds` and `text_limit_entry` are pure;
`measure_text_limit` runs it (through `limits.measure_pinned_throughput`, pinned like the encoder's
partition). The campaign measures it before and after the served sweeps and keeps the faster run
per batch size (the shared host drifts by 15-30% within minutes).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from contracts.token_padding import ATTENTION_MASK_INPUT, INPUT_IDS_INPUT, TOKEN_TYPES_INPUT
from perf_sweep.errors import SweepPlanError
from perf_sweep.limits import (
    DEFAULT_BATCH_SIZES,
    BatchCall,
    BatchCallsFor,
    LimitPoint,
    best_point,
    ceiling_of_runs,
    describe_pinning,
    limit_batch_sizes,
    measure_pinned_throughput,
    served_onnx_session,
)
from perf_sweep.plan import Endpoint

#: Tokenizer output -> attribute of a `tokenizers.Encoding` (what the served tokenizer emits).
TOKEN_FIELDS = {INPUT_IDS_INPUT: "ids", ATTENTION_MASK_INPUT: "attention_mask", TOKEN_TYPES_INPUT: "type_ids"}


@dataclass(frozen=True)
class TextPipeline:
    """What the served ensemble does to a batch of texts, and with which files."""

    tokenizer_model: str
    encoder_model: str
    tokenizer_file: Path
    max_length: int
    encoder_onnx: Path
    #: (encoder input, tokenizer output feeding it), in the encoder's input order.
    feeds: tuple[tuple[str, str], ...]
    pad_value: int = 0
    buckets: tuple[int, ...] = ()
    length_input: str = ""
    max_batch_size: int = 1
    #: The encoder's `intra_op_num_threads` parameter; 0 = the partition's thread count.
    configured_threads: int = 0

    def __post_init__(self) -> None:
        if self.max_length < 2:
            raise SweepPlanError(f"{self.tokenizer_model}: `max_length` = {self.max_length} must be >= 2 tokens.")
        if self.max_batch_size < 1:
            raise SweepPlanError(f"{self.encoder_model}: `max_batch_size` = {self.max_batch_size} must be >= 1.")
        if not self.feeds:
            raise SweepPlanError(f"{self.encoder_model}: no input is fed by {self.tokenizer_model}.")
        bad = [field for _, field in self.feeds if field not in TOKEN_FIELDS]
        if bad:
            raise SweepPlanError(f"{self.tokenizer_model} outputs {bad} are not token tensors; allowed {sorted(TOKEN_FIELDS)}.")
        if self.buckets:
            if list(self.buckets) != sorted(set(self.buckets)) or self.buckets[0] < 1:
                raise SweepPlanError(f"{self.encoder_model}: `sequence_buckets` {list(self.buckets)} must be strictly "
                                     "increasing positive token counts.")
            if self.length_input not in {name for name, _ in self.feeds}:
                raise SweepPlanError(f"{self.encoder_model}: `sequence_length_input` = {self.length_input!r} is not one "
                                     f"of its inputs {[name for name, _ in self.feeds]}.")

    def intra_op_threads(self, partition_threads: int) -> int:
        """The encoder's ONNX Runtime threads as served: its own parameter, else the partition's."""
        return self.configured_threads or partition_threads

    def describe(self, root: Path) -> str:
        from contracts.layout import display_path

        def rel(path: Path) -> str:
            return display_path(path, root)

        buckets = (f"sequence buckets {','.join(map(str, self.buckets))} on `{self.length_input}`" if self.buckets
                   else "no sequence buckets (one call per batch, padded to its longest text)")
        return (f"`{rel(self.tokenizer_file)}` (truncation at {self.max_length} tokens) -> `{rel(self.encoder_onnx)}` "
                f"({buckets}, padded with {self.pad_value})")


def _parameters(config: Mapping[str, Any]) -> dict[str, str]:
    return {k: (v or {}).get("string_value", "") for k, v in (config.get("parameters") or {}).items()}


def _int_parameter(model: str, params: Mapping[str, str], name: str, default: int | None = None) -> int:
    text = params.get(name, "")
    if text == "" and default is not None:
        return default
    try:
        return int(text)
    except ValueError:
        raise SweepPlanError(f"{model}: parameter `{name}` = {text!r} is not an integer"
                             f"{'' if default is None else f' (default {default})'}.") from None


def served_version_dir(repository: Path, model: str, version: int = -1) -> Path:
    """repository/<model>/<version>; version -1 (the ensemble's "latest") = the highest numbered one."""
    model_dir = Path(repository) / model
    if version >= 0:
        path = model_dir / str(version)
    else:
        versions = sorted((int(p.name) for p in model_dir.glob("*") if p.is_dir() and p.name.isdigit()), reverse=True)
        if not versions:
            raise SweepPlanError(f"{model_dir} has no numbered version directory: run `make build-engines`.")
        path = model_dir / str(versions[0])
    if not path.is_dir():
        raise SweepPlanError(f"{path} does not exist: the served version of {model} is not in {repository}.")
    return path


def _model_file(version_dir: Path, name: str, model: str, parameter: str) -> Path:
    path = version_dir / name
    if Path(name).name != name or not path.is_file():
        raise SweepPlanError(f"{model}: parameter `{parameter}` = {name!r} must name a file in {version_dir}.")
    return path


def plan_text_pipeline(ensemble: Mapping[str, Any], steps: Mapping[str, Mapping[str, Any]],
                       repository: Path) -> TextPipeline:
    """The pipeline of a served tokenizer -> encoder ensemble, from the served configs (as Triton's
    config API returns them) and the files of the served model repository."""
    name = ensemble.get("name", "ensemble")
    chain = (ensemble.get("ensemble_scheduling") or {}).get("step") or []
    if len(chain) != 2:
        raise SweepPlanError(f"{name}: expected an ensemble of 2 steps (tokenizer -> encoder), got "
                             f"{[s.get('model_name') for s in chain]}.")
    ensemble_inputs = {t["name"] for t in ensemble.get("input", [])}
    first_in = set((chain[0].get("input_map") or {}).values())
    tok_step, enc_step = (chain[0], chain[1]) if first_in & ensemble_inputs else (chain[1], chain[0])
    tok_name, enc_name = tok_step["model_name"], enc_step["model_name"]
    missing = [m for m in (tok_name, enc_name) if m not in steps]
    if missing:
        raise SweepPlanError(f"{name}: configs of steps {missing} were not given.")
    tok_cfg, enc_cfg = steps[tok_name], steps[enc_name]
    if [t.get("data_type") for t in tok_cfg.get("input", [])] != ["TYPE_STRING"]:
        raise SweepPlanError(f"{name}: step {tok_name} must take one string input, got {tok_cfg.get('input')}.")
    if enc_cfg.get("backend") != "onnxruntime_cpu":
        raise SweepPlanError(f"{name}: step {enc_name} runs on backend {enc_cfg.get('backend') or enc_cfg.get('platform')!r}; "
                             "the in-process limit needs the CPU path `onnxruntime_cpu`.")
    produced_by = {tensor: output for output, tensor in (tok_step.get("output_map") or {}).items()}
    enc_map = enc_step.get("input_map") or {}
    feeds = []
    for tensor in enc_cfg.get("input", []):
        source = produced_by.get(enc_map.get(tensor["name"], ""))
        if source is None:
            raise SweepPlanError(f"{name}: input {tensor['name']!r} of {enc_name} is not fed by {tok_name}.")
        feeds.append((tensor["name"], source))
    tok_params, enc_params = _parameters(tok_cfg), _parameters(enc_cfg)
    from contracts.errors import ServingError
    from contracts.sequence_buckets import BUCKETS_PARAMETER, LENGTH_INPUT_PARAMETER, parse_bucket_boundaries

    try:
        buckets = parse_bucket_boundaries(enc_params.get(BUCKETS_PARAMETER, ""))
    except ServingError as exc:
        raise SweepPlanError(f"{enc_name}: {exc}") from None
    tok_dir = served_version_dir(repository, tok_name, int(tok_step.get("model_version", -1)))
    enc_dir = served_version_dir(repository, enc_name, int(enc_step.get("model_version", -1)))
    return TextPipeline(
        tokenizer_model=tok_name, encoder_model=enc_name,
        tokenizer_file=_model_file(tok_dir, tok_params.get("tokenizer_file") or "tokenizer.json", tok_name, "tokenizer_file"),
        max_length=_int_parameter(tok_name, tok_params, "max_length"),
        encoder_onnx=_model_file(enc_dir, enc_params.get("onnx_file") or "model.onnx", enc_name, "onnx_file"),
        feeds=tuple(feeds), pad_value=_int_parameter(enc_name, enc_params, "pad_value", 0), buckets=buckets,
        length_input=enc_params.get(LENGTH_INPUT_PARAMETER, "") if buckets else "",
        max_batch_size=int(enc_cfg.get("max_batch_size") or 1),
        configured_threads=_int_parameter(enc_name, enc_params, "intra_op_num_threads", 0))


def plan_fused_text_pipeline(config: Mapping[str, Any], repository: Path) -> TextPipeline:
    """The pipeline of a served text model that tokenizes and encodes in one execution (the
    `onnxruntime_cpu` backend with a `tokenizer_file`: the fused `text_embedder`)."""
    import onnx

    from contracts.errors import ServingError
    from contracts.sequence_buckets import BUCKETS_PARAMETER, LENGTH_INPUT_PARAMETER, parse_bucket_boundaries

    name = config.get("name", "model")
    params = _parameters(config)
    if not is_fused_text_model(config):
        raise SweepPlanError(f"{name}: not an onnxruntime_cpu model with a `tokenizer_file` parameter.")
    version_dir = served_version_dir(repository, name)
    onnx_path = _model_file(version_dir, params.get("onnx_file") or "model.onnx", name, "onnx_file")
    graph_inputs = [i.name for i in onnx.load(str(onnx_path), load_external_data=False).graph.input]
    try:
        buckets = parse_bucket_boundaries(params.get(BUCKETS_PARAMETER, ""))
    except ServingError as exc:
        raise SweepPlanError(f"{name}: {exc}") from None
    return TextPipeline(
        tokenizer_model=name, encoder_model=name,
        tokenizer_file=_model_file(version_dir, params["tokenizer_file"], name, "tokenizer_file"),
        max_length=_int_parameter(name, params, "max_length"), encoder_onnx=onnx_path,
        feeds=tuple((n, n) for n in graph_inputs), pad_value=_int_parameter(name, params, "pad_value", 0), buckets=buckets,
        length_input=params.get(LENGTH_INPUT_PARAMETER, "") if buckets else "",
        max_batch_size=int(config.get("max_batch_size") or 1),
        configured_threads=_int_parameter(name, params, "intra_op_num_threads", 0))


def is_fused_text_model(config: Mapping[str, Any]) -> bool:
    """An onnxruntime_cpu model with the backend's text front-end (TEXT in, tokenized inside)."""
    return config.get("backend") == "onnxruntime_cpu" and bool(_parameters(config).get("tokenizer_file"))


def cycle_batches(count: int, batch_size: int) -> list[np.ndarray]:
    """Row indices of consecutive batches covering all `count` samples once; the last batch wraps
    around to the start so every batch is full (a saturated dynamic batcher executes full batches)."""
    if count < 1 or batch_size < 1:
        raise SweepPlanError(f"need count >= 1 and batch_size >= 1, got count={count}, batch_size={batch_size}.")
    batches = -(-count // batch_size)
    return [np.arange(i * batch_size, (i + 1) * batch_size) % count for i in range(batches)]


def pad_rows(rows: Sequence[Sequence[int]], pad_value: int = 0) -> np.ndarray:
    """int64 [len(rows), longest], right-padded (contracts.token_padding, the backend's rule)."""
    from contracts.token_padding import pad_rows as pad

    if not len(rows):
        raise SweepPlanError("pad_rows needs at least one row.")
    return pad(rows, pad_value)


def encoder_feeds(encodings: Sequence[Any], feeds: Sequence[tuple[str, str]], pad_value: int = 0) -> dict[str, np.ndarray]:
    """The encoder's inputs for one batch of `tokenizers.Encoding`s, padded as the served backend pads."""
    return {name: pad_rows([getattr(e, TOKEN_FIELDS[field]) for e in encodings], pad_value) for name, field in feeds}


def decode_texts(samples: Any) -> list[bytes]:
    """The texts perf_analyzer sends (PreparedInputs.samples: [N, 1] objects) as UTF-8 bytes."""
    rows = [np.asarray(s).reshape(-1)[0] for s in samples]
    return [r if isinstance(r, bytes) else str(r).encode("utf-8") for r in rows]


def embed_batch(tokenizer, run, pipeline: TextPipeline, raw_texts: Sequence[bytes]):
    """Decode, tokenize, pad and run one batch as the served ensemble does (buckets included)."""
    from contracts.sequence_buckets import run_in_length_buckets

    encodings = tokenizer.encode_batch([t.decode("utf-8") for t in raw_texts])
    feeds = encoder_feeds(encodings, pipeline.feeds, pipeline.pad_value)
    if pipeline.buckets:
        return run_in_length_buckets(run, feeds, pipeline.length_input, pipeline.buckets)
    return run(feeds)


def served_tokenizer(pipeline: TextPipeline):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(pipeline.tokenizer_file))
    tokenizer.enable_truncation(pipeline.max_length)
    tokenizer.no_padding()
    return tokenizer


def measure_text_limit(pipeline: TextPipeline, texts: Sequence[bytes], partition_threads: int = 0,
                       cpus: Sequence[int] = (), batch_sizes: Sequence[int] | None = None,
                       seconds_per_batch: float = 1.5) -> list[LimitPoint]:
    """Texts/s of tokenize + encode in this process, pinned to `cpus` (the tokenizer's Rust thread
    pool and ONNX Runtime's threads start after pinning), at each batch size up to the encoder's
    max_batch_size, each over at least one whole pass of `texts`."""
    sizes = limit_batch_sizes(pipeline.max_batch_size, batch_sizes or DEFAULT_BATCH_SIZES)
    texts = list(texts)

    def setup() -> BatchCallsFor:
        tokenizer = served_tokenizer(pipeline)
        session = served_onnx_session(pipeline.encoder_onnx, pipeline.intra_op_threads(partition_threads))
        names = [o.name for o in session.get_outputs()]
        run = partial(session.run, names)

        def calls_for(batch: int) -> list[BatchCall]:
            return [partial(embed_batch, tokenizer, run, pipeline, [texts[i] for i in rows])
                    for rows in cycle_batches(len(texts), batch)]

        return calls_for

    return measure_pinned_throughput(setup, sizes, seconds_per_batch, cpus)


def text_limit_entry(pipeline: TextPipeline, where: Endpoint, variant: str, texts: int, runs: Mapping[str, Sequence[Any]],
                     root: Path) -> dict[str, Any]:
    """results.json `limits.<model>`: the per-batch ceiling over `runs` ({when: [LimitPoint]}), the
    raw runs, and how they were measured. Pure."""
    points = ceiling_of_runs(list(runs.values()))
    best = best_point(points)
    pinning = describe_pinning(where.limit_cpus, pipeline.intra_op_threads(where.intra_op_threads), where.server)
    spread = "; ".join(f"{when}: best {best_point(run).throughput:.0f} texts/s" for when, run in runs.items())
    text = (f"{pipeline.describe(root)}, the {variant} encoder, in this process, {pinning}. Batches are consecutive "
            f"slices of the {texts} swept texts (each batch size times whole passes over all of them), up to the "
            f"encoder's max_batch_size {pipeline.max_batch_size}. Measured {len(runs)} time(s) ({spread}); the table "
            f"keeps the faster run per batch size: best {best.throughput:.0f} texts/s at batch {best.batch_size}.")
    return {"text": text, "points": [p.__dict__ for p in points], "best": best.__dict__, "unit": "texts/s",
            "what": f"tokenize + {variant} encoder as served",
            "runs": {when: [p.__dict__ for p in run] for when, run in runs.items()}}
