"""Which files this project serves, read from the model repository's own configs, so every peer
loads the same bytes whatever layout the served text model has.

`digit_classifier` is one ONNX model (its `onnx_file` parameter, default model.onnx). The text
embedder is either an ensemble `text_tokenizer -> text_encoder` (the tokenizer step's
`tokenizer_file` and `max_length`, the encoder step's `onnx_file`) or one fused model doing both
(its own `onnx_file`, `tokenizer_file`, `max_length`). Each config.pbtxt is parsed with Triton's
own schema (tritonclient's model_config_pb2), the highest numbered version directory is the served
one (as Triton's default version policy serves it).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from perf_sweep.errors import SweepPlanError

DIGITS, TEXT = "digit_classifier", "text_embedder"


@dataclass(frozen=True)
class ServedFiles:
    """The served files every peer loads (the same bytes this project serves)."""

    digits_onnx: Path
    text_onnx: Path
    tokenizer_json: Path
    #: Truncation length, read from the served tokenizing config (its one source: serving.toml's
    #: model options, rendered into the config); the peers truncate at the same length.
    max_length: int
    text_layout: str = "ensemble text_tokenizer -> text_encoder"
    #: The served encoder's `sequence_buckets` (contracts.sequence_buckets), () when it pads to the longest.
    served_buckets: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.max_length < 2:
            raise SweepPlanError(f"`max_length` = {self.max_length} must be >= 2 tokens.")

    @classmethod
    def from_repository(cls, repository: Path) -> "ServedFiles":
        return served_files(Path(repository))

    def describe(self, root: Path) -> str:
        from contracts.layout import display_path

        def rel(path: Path) -> str:
            return display_path(path, root)

        return (f"`{rel(self.digits_onnx)}`; `{rel(self.text_onnx)}` + `{rel(self.tokenizer_json)}` "
                f"(truncation at {self.max_length} tokens; served as {self.text_layout})")


def read_model_config(repository: Path, model: str):
    """`repository/<model>/config.pbtxt` as Triton's ModelConfig message."""
    from contracts.errors import ConfigError
    from contracts.model_config import read_model_config as read_config

    try:
        return read_config(repository / model)
    except ConfigError as exc:
        raise SweepPlanError(str(exc)) from None


def _parameter(config, name: str, default: str = "") -> str:
    return config.parameters[name].string_value if name in config.parameters else default


def _max_length(config, model: str) -> int:
    """The served tokenizer's truncation length. No default: the backend refuses to load a text
    front-end without one, so a config lacking it is not what this project serves."""
    text = _parameter(config, "max_length")
    if not text:
        raise SweepPlanError(f"{model}: the config has no `max_length` parameter (the truncation length in tokens, "
                             "rendered from serving.toml's model options); re-render it with `make build-engines`.")
    try:
        return int(text)
    except ValueError:
        raise SweepPlanError(f"{model}: parameter `max_length` = {text!r} is not a whole number of tokens.") from None


def _served_file(repository: Path, model: str, name: str) -> Path:
    from perf_sweep.text_limit import served_version_dir

    path = served_version_dir(repository, model) / name
    if Path(name).name != name or not path.is_file():
        raise SweepPlanError(f"{model} serves `{name}`, which is not a file at {path}: run `make build-engines` first.")
    return path


def _buckets(config, model: str) -> tuple[int, ...]:
    from contracts.errors import ServingError
    from contracts.sequence_buckets import BUCKETS_PARAMETER, parse_bucket_boundaries

    try:
        return parse_bucket_boundaries(_parameter(config, BUCKETS_PARAMETER))
    except ServingError as exc:
        raise SweepPlanError(f"{model}: {exc}") from None


def served_files(repository: Path) -> ServedFiles:
    digits = read_model_config(repository, DIGITS)
    digits_onnx = _served_file(repository, DIGITS, _parameter(digits, "onnx_file", "model.onnx"))
    text = read_model_config(repository, TEXT)
    if text.platform != "ensemble":
        return ServedFiles(digits_onnx, _served_file(repository, TEXT, _parameter(text, "onnx_file", "model.onnx")),
                           _served_file(repository, TEXT, _parameter(text, "tokenizer_file", "tokenizer.json")),
                           _max_length(text, TEXT), f"one model `{TEXT}` (backend {text.backend or '?'})",
                           _buckets(text, TEXT))
    from tritonclient.grpc.model_config_pb2 import TYPE_STRING

    steps = [read_model_config(repository, step.model_name) for step in text.ensemble_scheduling.step]
    tokenizers = [s for s in steps if [i.data_type for i in s.input] == [TYPE_STRING]]
    encoders = [s for s in steps if [i.data_type for i in s.input] != [TYPE_STRING]]
    if len(tokenizers) != 1 or len(encoders) != 1:
        raise SweepPlanError(f"{TEXT} is an ensemble of {[s.name for s in steps]}; expected one tokenizer step (one "
                             "string input) and one encoder step.")
    tok, enc = tokenizers[0], encoders[0]
    return ServedFiles(digits_onnx, _served_file(repository, enc.name, _parameter(enc, "onnx_file", "model.onnx")),
                       _served_file(repository, tok.name, _parameter(tok, "tokenizer_file", "tokenizer.json")),
                       _max_length(tok, tok.name), f"ensemble {tok.name} -> {enc.name}", _buckets(enc, enc.name))
