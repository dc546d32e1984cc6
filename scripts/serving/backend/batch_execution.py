"""Run the requests of one dynamic batch as few framework calls as possible, without letting one
request fail the others.

The `onnxruntime_cpu` backend concatenates a batch's requests along the batch axis (right-padding
variable axes), optionally splits the rows into sequence-length buckets (contracts.sequence_buckets),
and makes one ONNX Runtime call per bucket. If ONNX Runtime still fails on a batch, something the
input contract (serving.backend.input_contract) could not foresee is wrong with one or more requests: the
batch is split in halves and each half re-run, recursively, until the failing requests stand
alone. Only those are answered with an error; every other request gets the answer it would have
had on its own. A batch of n requests with one bad request costs at most 2 log2(n) extra calls.

Few numpy calls per execution: this runs in the stub between ONNX Runtime calls, which have just
pulled the model's weights through the caches, and there each numpy call costs 10-20 us against
0.5-5 us in a warm loop (docs/measurements/2026-12-05-intel-xeon/cold-numpy/). A lone held-out text
spent ~0.40-0.44 ms of its execution outside ONNX Runtime, at c=16 1.1-1.5 ms per execution of ~4
requests. So a batch of requests is padded into one array per input (`concat_padded`), a lone
unpadded row skips the bucketing's reductions (contracts.sequence_buckets), real tokens are one
count, the text front-end pads a batch's texts at once (serving/backend/text_frontend.py) and the
answers are checked for NaN/Inf once per batch (serving/backend/checks.py).

Pure apart from the `run` callable it is given (an ONNX Runtime session's `run`, in production and
in the unit tests): no Triton here. Also returns what the batch cost (`BatchStats`): rows, real vs
computed tokens (padding efficiency), framework calls and time, for the backend's metrics.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence, TypeVar

import numpy as np

from contracts.sequence_buckets import run_in_length_buckets
from contracts.token_padding import concat_padded, sequence_pad_value

#: A framework call: feeds by input name -> outputs (rows on axis 0), in the model's output order.
RunFeeds = Callable[[dict[str, np.ndarray]], Sequence[np.ndarray]]
T = TypeVar("T")


class NotBatchAxisError(ValueError):
    """The framework answered a number of output rows other than the input rows: the output's first
    axis is not the batch, so its rows cannot be split back into requests (they would go to others)."""


def check_output_rows(outputs: Sequence[np.ndarray], rows: int) -> None:
    """Raise NotBatchAxisError unless every output has `rows` rows (one per input row of the call)."""
    for index, out in enumerate(outputs):
        if out.ndim == 0 or out.shape[0] != rows:
            raise NotBatchAxisError(
                f"the model's output #{index} has shape {list(out.shape)} for {rows} input row(s): its first axis is not "
                f"the batch, so its rows cannot be split back into the requests; expected one output row per input row "
                f"(re-export the graph with the batch as every output's first axis).")


def run_isolating_failures(run_group: Callable[[Sequence[int]], Sequence[T]], indices: Sequence[int]) -> dict[int, T | Exception]:
    """{index: result, or the exception that index alone raised}: `run_group(indices)` runs those
    items as one call and returns one result per index; a failed group is re-run in halves."""
    indices = list(indices)
    if not indices:
        return {}
    try:
        return dict(zip(indices, run_group(indices)))
    except Exception as exc:  # noqa: BLE001 - any framework failure is isolated, then reported per request
        if len(indices) == 1:
            return {indices[0]: exc}
        middle = len(indices) // 2
        return {**run_isolating_failures(run_group, indices[:middle]), **run_isolating_failures(run_group, indices[middle:])}


@dataclass(frozen=True)
class BatchLayout:
    """How a batch's requests become framework feeds."""

    input_names: tuple[str, ...]
    pad_value: int = 0
    #: Sequence-length bucket boundaries; () = one call for the whole batch.
    buckets: tuple[int, ...] = ()
    #: The 0/1 mask whose real lengths pick buckets and count real tokens; None for fixed shapes.
    length_input: str | None = None

    def __post_init__(self) -> None:
        if self.buckets and self.length_input not in self.input_names:
            raise ValueError(f"bucketing needs `length_input` among the inputs {list(self.input_names)}, got {self.length_input!r}.")

    def pad_for(self, name: str) -> int:
        """What pads input `name` across the requests of a batch (contracts.token_padding.sequence_pad_value)."""
        return sequence_pad_value(name, self.pad_value, self.length_input)


@dataclass(frozen=True)
class BatchStats:
    """What one executed batch cost: its fill, its padding and its framework time."""

    requests: int
    rows: int
    real_tokens: int
    computed_tokens: int
    framework_calls: int
    framework_s: float
    failed_requests: int
    #: framework calls by padded width (tokens; 0 for models without a sequence axis)
    calls_by_width: Mapping[int, int] = field(default_factory=dict)

    @property
    def padding_efficiency(self) -> float:
        """Real tokens / tokens computed (1.0 for models without a sequence axis)."""
        return self.real_tokens / self.computed_tokens if self.computed_tokens else 1.0


class _Meter:
    """Wraps the framework call to count calls, time and tokens (bisection re-runs included)."""

    def __init__(self, run: RunFeeds, length_input: str | None):
        self.run, self.length_input = run, length_input
        self.calls, self.seconds, self.real, self.computed = 0, 0.0, 0, 0
        self.widths: Counter = Counter()

    def __call__(self, feeds: dict[str, np.ndarray]) -> Sequence[np.ndarray]:
        start = time.perf_counter()
        try:
            return self.run(feeds)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1
            if self.length_input is not None:  # real tokens = the mask's non-zero entries (one numpy call)
                mask = feeds[self.length_input]
                self.computed += int(mask.shape[0] * mask.shape[1])
                self.real += int(np.count_nonzero(mask))
                self.widths[int(mask.shape[1])] += 1
            else:
                self.widths[0] += 1


def execute_batch(run: RunFeeds, layout: BatchLayout, requests: Sequence[Mapping[str, np.ndarray]]
                  ) -> tuple[list[list[np.ndarray] | Exception], BatchStats]:
    """Per request: its outputs (split back from the batch) or the exception it alone caused."""
    meter = _Meter(run, layout.length_input)
    sizes = [int(r[layout.input_names[0]].shape[0]) for r in requests]

    def run_group(indices: Sequence[int]) -> list[list[np.ndarray]]:
        feeds = {name: concat_padded([requests[i][name] for i in indices], layout.pad_for(name)) for name in layout.input_names}
        if layout.buckets:
            outputs = run_in_length_buckets(meter, feeds, layout.length_input, layout.buckets)
        else:
            outputs = meter(feeds)
        check_output_rows(outputs, sum(sizes[i] for i in indices))  # never hand one request another's rows
        results, start = [], 0
        for i in indices:
            results.append([out[start:start + sizes[i]] for out in outputs])
            start += sizes[i]
        return results

    by_index = run_isolating_failures(run_group, range(len(requests)))
    answers = [by_index[i] for i in range(len(requests))]
    failed = sum(isinstance(a, Exception) for a in answers)
    stats = BatchStats(len(requests), sum(sizes), meter.real, meter.computed, meter.calls, meter.seconds, failed,
                       dict(meter.widths))
    return answers, stats
