"""Sequence-length bucketing: less padding inside one dynamic batch of variable-length inputs.

A transformer's cost grows with batch x padded length. When a dynamic batch mixes one long text
with many short ones, padding every row to the longest wastes most of the work (on documentation
sentences, median ~20 tokens, a few over 100). Bucketing splits the batch's rows by real length at
fixed boundaries (e.g. 16, 24, 32, 48, 64, 96, 128) and pads each bucket only to ITS longest real row, at the
price of one framework call per non-empty bucket (at most len(boundaries) calls per batch).

The same functions run inside the `onnxruntime_cpu` backend (so what is served is what is
measured), in the padding report (scripts/perf_sweep/padding_report.py) and in the unit tests.
Pure: numpy in, numpy out.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from contracts.errors import ConfigError

#: The config parameter that turns bucketing on: comma-separated increasing boundaries.
BUCKETS_PARAMETER = "sequence_buckets"
#: The config parameter naming the input whose non-zero entries mark real tokens (the mask).
LENGTH_INPUT_PARAMETER = "sequence_length_input"
#: The config parameter bounding every variable axis of a request (the length the model was exported
#: and validated with): the backend refuses a longer one, and the request guard's per-input limit is
#: checked against it (contracts.model_config.request_input_bounds).
MAX_LENGTH_PARAMETER = "max_sequence_length"
#: Integer inputs whose names end like this are 0/1 masks (Hugging Face naming); one rule for the
#: backend's input contract (serving/backend/input_contract.py) and the warmup data that
#: contracts.model_config renders.
MASK_SUFFIX = "mask"
SMALLEST_BUCKET = 16


#: The config parameter listing a model's 0/1 mask inputs exactly (comma-separated; may be empty). A
#: model whose config sets it gets the mask rule on those inputs only, not by the naming rule: a model
#: brought as an ONNX file (recipe `onnx_file`) may name a weight or a True-is-padding mask `*mask`.
MASK_INPUTS_PARAMETER = "mask_inputs"

#: The config parameter giving, per input with variable axes that are NOT token sequences (an image's
#: height and width), the largest dims after the batch axis a request may send, as JSON
#: (`{"x": [3, 960, 960]}`). Such inputs are batched by Triton's own rule, requests of EQUAL shapes only
#: (no `allow_ragged_batch`, nothing padded), so their outputs may have variable axes too; the backend
#: refuses a request over these dims, the request guard's limit is checked against them
#: (contracts.model_config.request_input_bounds), and warm-up and the build's checks run at them.
MAX_INPUT_DIMS_PARAMETER = "max_input_dims"


def parse_max_input_dims(text: str) -> dict[str, tuple[int, ...]]:
    """The `max_input_dims` parameter's value: {input: dims}; {} when empty. Raises ConfigError."""
    import json

    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"`{MAX_INPUT_DIMS_PARAMETER}` = {text!r} is not JSON ({exc}); expected e.g. "
                          f'{{"x": [3, 960, 960]}}.') from None
    if not isinstance(value, dict) or not all(
            isinstance(dims, list) and dims and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims)
            for dims in value.values()):
        raise ConfigError(f"`{MAX_INPUT_DIMS_PARAMETER}` = {text!r}: expected an object of input name -> list of dims "
                          f'>= 1, e.g. {{"x": [3, 960, 960]}}.')
    return {str(name): tuple(dims) for name, dims in value.items()}


def max_input_dims_value(dims: Mapping[str, Sequence[int]]) -> str:
    """The parameter's string for `dims` (parse_max_input_dims reads it back)."""
    import json

    return json.dumps({name: [int(d) for d in value] for name, value in sorted(dims.items())}, separators=(",", ":"))


def mask_input_names(input_names: Iterable[str], parameters: Mapping[str, str]) -> frozenset[str]:
    """The 0/1 mask inputs of a model, from its config parameters: exactly `mask_inputs` where set,
    else the naming rule (`is_mask_input`). One answer for the backend's input contract and for the
    warm-up data the config renders (ones for masks), which must agree."""
    explicit = parameters.get(MASK_INPUTS_PARAMETER)
    if explicit is not None:
        return frozenset(name.strip() for name in str(explicit).split(",") if name.strip())
    length_input = parameters.get(LENGTH_INPUT_PARAMETER, "")
    return frozenset(name for name in input_names if is_mask_input(name, [length_input] if length_input else []))


def is_mask_input(name: str, mask_inputs: Iterable[str] = ()) -> bool:
    """The 0/1-mask naming rule: named by the backend's `sequence_length_input`, or ending in `mask`.
    Here, not beside the config rendering that also uses it, because the backend stub imports it and
    must not need tritonclient (contracts.model_config's schema) on a pod's Python path."""
    return name in set(mask_inputs) or name.lower().endswith(MASK_SUFFIX)


def parse_bucket_boundaries(text: str) -> tuple[int, ...]:
    """'16,32,64,128' -> (16, 32, 64, 128); '' -> () (bucketing off)."""
    text = (text or "").strip()
    if not text:
        return ()
    try:
        boundaries = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(
            f"`{BUCKETS_PARAMETER}` = {text!r} is not a list of integers: expected e.g. '16,32,64,128'."
        ) from None
    return check_bucket_boundaries(boundaries)


def check_bucket_boundaries(boundaries: Sequence[int]) -> tuple[int, ...]:
    boundaries = tuple(boundaries)
    if not boundaries or any(b < 1 for b in boundaries) or list(boundaries) != sorted(set(boundaries)):
        raise ConfigError(
            f"`{BUCKETS_PARAMETER}` = {list(boundaries)} must be strictly increasing positive token counts, "
            "e.g. [16, 32, 64, 128]."
        )
    return boundaries


def format_bucket_boundaries(boundaries: Sequence[int]) -> str:
    return ",".join(str(b) for b in check_bucket_boundaries(boundaries))


def default_bucket_boundaries(max_length: int, smallest: int = SMALLEST_BUCKET) -> tuple[int, ...]:
    """Powers of two from `smallest` and the points 1.5x between them, up to `max_length` (always
    the last): 16, 24, 32, 48, 64, 96, 128 for 128 tokens.

    A bucket then pads a row by at most a third of its length (a half with powers of two alone),
    for at most 7 framework calls per batch. On documentation sentences in batches of 32 this kept
    89% of the encoder's work real versus 78% with powers of two, and ran faster in ONNX Runtime
    (scripts/perf_sweep/padding_report.py).
    """
    if max_length < 1 or smallest < 1:
        raise ConfigError(f"`max_length` = {max_length} and `smallest` = {smallest} must be >= 1.")
    boundaries = set()
    size = smallest
    while size < max_length:
        boundaries.update(b for b in (size, size * 3 // 2) if b < max_length)
        size *= 2
    boundaries.add(max_length)
    return tuple(sorted(boundaries))


def real_lengths(mask: np.ndarray) -> np.ndarray:
    """Per row of a right-padded [rows, length] mask: index of the last non-zero entry + 1.

    Rows with no real token count as length 1, so no bucket is ever trimmed to zero width.
    """
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"the length input must be [rows, sequence], got shape {list(mask.shape)}.")
    rows, width = mask.shape
    if rows == 1 and width and mask[0, -1] != 0:  # a lone unpadded row (a lone text): no reduction over the mask
        # (each numpy call costs 10-20 us right after a framework call: serving/backend/batch_execution.py)
        return np.array([width], dtype=np.int64)
    nonzero = mask != 0
    last = width - np.argmax(nonzero[:, ::-1], axis=1)
    return np.where(nonzero.any(axis=1), last, 1).astype(np.int64)


def assign_buckets(lengths: Sequence[int], boundaries: Sequence[int]) -> list[np.ndarray]:
    """Row indices of each non-empty bucket, shortest bucket first.

    A row goes to the first boundary >= its length; rows longer than the last boundary share the
    last bucket (it is padded to their real length, never truncated). One bisect per row in plain
    Python: this runs in every execute of the backend, right after a framework call, where the
    numpy version's eight calls cost ~95 us for four rows and this ~30 (serving/backend/batch_execution.py).
    """
    edges = check_bucket_boundaries(boundaries)
    if len(lengths) < 2:  # a lone row: its own bucket
        return [np.arange(len(lengths))] if len(lengths) else []
    last = len(edges) - 1
    rows_of_bucket: dict[int, list[int]] = {}
    for row, length in enumerate(lengths.tolist() if isinstance(lengths, np.ndarray) else lengths):
        rows_of_bucket.setdefault(min(bisect_left(edges, length), last), []).append(row)
    return [np.array(rows_of_bucket[bucket], dtype=np.intp) for bucket in sorted(rows_of_bucket)]


@dataclass(frozen=True)
class PaddingStats:
    """Padding efficiency = real tokens / tokens computed (rows x padded length, summed over calls)."""

    real_tokens: int
    computed_tokens: int
    framework_calls: int

    def __post_init__(self) -> None:
        if self.real_tokens < 0 or self.computed_tokens < self.real_tokens or self.framework_calls < 0:
            raise ValueError(f"inconsistent padding counts: {self}.")

    @property
    def efficiency(self) -> float:
        return self.real_tokens / self.computed_tokens if self.computed_tokens else 1.0

    def __add__(self, other: "PaddingStats") -> "PaddingStats":
        return PaddingStats(
            self.real_tokens + other.real_tokens, self.computed_tokens + other.computed_tokens,
            self.framework_calls + other.framework_calls,
        )


def padding_to_fixed_length(lengths: Sequence[int], width: int) -> PaddingStats:
    """Every row padded to `width` (e.g. the model's maximum length) in one call."""
    lengths = np.minimum(np.asarray(lengths, dtype=np.int64), width)
    return PaddingStats(int(lengths.sum()), int(len(lengths) * width), 1)


def padding_to_longest(lengths: Sequence[int]) -> PaddingStats:
    """The whole batch padded to its longest row in one call (the backend without bucketing)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return PaddingStats(int(lengths.sum()), int(len(lengths) * lengths.max()), 1)


def padding_with_buckets(lengths: Sequence[int], boundaries: Sequence[int]) -> PaddingStats:
    """Each bucket padded to its own longest row, one call per non-empty bucket."""
    lengths = np.asarray(lengths, dtype=np.int64)
    groups = assign_buckets(lengths, boundaries)
    computed = sum(len(g) * int(lengths[g].max()) for g in groups)
    return PaddingStats(int(lengths.sum()), int(computed), len(groups))


def run_in_length_buckets(
    run: Callable[[dict[str, np.ndarray]], Sequence[np.ndarray]],
    feeds: Mapping[str, np.ndarray],
    length_input: str,
    boundaries: Sequence[int],
) -> list[np.ndarray]:
    """Run `feeds` ([rows, sequence] each) as one call per length bucket; outputs in row order.

    Each bucket's rows are trimmed to that bucket's longest real row (right padding only, so the
    trimmed columns are padding). `run` takes feeds and returns outputs with rows on axis 0 and no
    sequence axis (e.g. pooled embeddings), so the parts can be put back into one array.
    """
    lengths = real_lengths(feeds[length_input])
    groups = assign_buckets(lengths, boundaries)
    if len(groups) == 1:  # every row in one bucket: trim the columns, no row gather, no re-assembly
        width = int(lengths[0] if len(lengths) == 1 else lengths.max())
        return list(run({name: array if array.shape[1] == width else np.ascontiguousarray(array[:, :width])
                         for name, array in feeds.items()}))
    outputs: list[np.ndarray] | None = None
    for rows in groups:
        width = int(lengths[rows].max())
        part = run({name: np.ascontiguousarray(array[rows, :width]) for name, array in feeds.items()})
        if outputs is None:
            outputs = [np.empty((len(lengths), *p.shape[1:]), dtype=p.dtype) for p in part]
        for full, p in zip(outputs, part):
            full[rows] = p
    assert outputs is not None  # assign_buckets returns at least one bucket for at least one row
    return outputs
