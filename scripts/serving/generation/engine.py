"""Run the scheduler's steps: ONNX Runtime computes, the project's block pool holds the KV cache.

`DecoderGraph` is the thin ONNX Runtime wrapper around the exported decoder-step graph
(build/model_build/llm/graph.py documents its tensors). `GenerationEngine` does one scheduler step
per `step()` call: all decoding sequences
share one batched graph call (padded to the longest past, masked by `past_length`); the step's prefill chunks
share another (padded to the longest chunk). New K/V go
into the sequences' blocks, a token is sampled for every sequence whose feed reached its end, and
the scheduler records the results. `step()` returns what happened, for streaming and metrics.

Threading: `submit` and `cancel` may be called from any thread (Triton's request threads); the
lock covers the scheduler's bookkeeping only, never a graph call, so intake stays responsive
while a step computes.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from contracts.onnx_sessions import CPU_PROVIDER, CUDA_PROVIDER, disabled_fusions, served_session_options
from serving.generation.kv_store import KvStore
from serving.generation.requests import GenerationRequest
from serving.generation.sampling import new_rng, sample_token
from serving.generation.scheduler import Scheduler, Sequence


#: The decoder-step graph's inputs and outputs, in `DecoderGraph.run`'s order (model_build.llm.graph exports them).
GRAPH_INPUTS = ("input_ids", "position_ids", "past_key", "past_value", "past_length", "last_index")
GRAPH_OUTPUTS = ("logits", "new_key", "new_value")


class DecoderGraph:
    """The decoder-step graph in an ONNX Runtime session (CPU, or CUDA where asked and present)."""

    def __init__(self, onnx_path: str, threads: int = 0, provider: str = "auto") -> None:
        import onnxruntime as ort

        if provider == "auto":  # onnxruntime-gpu on a GPU host: the same graph on the CUDA provider
            provider = CUDA_PROVIDER if CUDA_PROVIDER in ort.get_available_providers() else CPU_PROVIDER
        self.provider = provider
        # the served sessions' options and fusion rule (contracts.onnx_sessions; no node of this graph is
        # fused by the rule today). Its workers spin within a step and stop at its end: ONNX Runtime's
        # default kept them spinning after each step, on the cores its partition's other model computes on.
        options = served_session_options(threads, spin_within_run=True)
        self.session = ort.InferenceSession(onnx_path, options, providers=[provider], disabled_optimizers=disabled_fusions([provider]))

    def run(self, input_ids, position_ids, past_key, past_value, past_length, last_index):
        feeds = dict(zip(GRAPH_INPUTS, (input_ids, position_ids, past_key, past_value, past_length, last_index)))
        return self.session.run(list(GRAPH_OUTPUTS), feeds)


@dataclass
class StepResult:
    tokens: list[tuple[Sequence, int]] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)
    decode_batch: int = 0
    prefill_tokens: int = 0
    seconds: float = 0.0


class GenerationEngine:
    def __init__(self, graph: DecoderGraph, scheduler: Scheduler, store: KvStore,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.graph = graph
        self.scheduler = scheduler
        self.store = store
        self.clock = clock
        self.lock = threading.Lock()
        self._rngs: dict[str, np.random.Generator] = {}

    def submit(self, request: GenerationRequest, arrived: float | None = None) -> Sequence:
        """Queue `request`; `arrived` (this engine's clock) is when it reached the model, before it was
        parsed and tokenized (up to ~180 ms for a long prompt), which its time to first token, its
        `deadline_ms` and its queue timeout count from; now when not given."""
        rng = new_rng(request.sampling)
        with self.lock:  # its generator is in place before the loop's next plan can see the sequence
            sequence = self.scheduler.submit(request, self.clock() if arrived is None else arrived)
            self._rngs[request.request_id] = rng
        return sequence

    def cancel(self, request_id: str) -> bool:
        with self.lock:
            return self.scheduler.cancel(request_id)

    def stop(self, request_id: str) -> bool:
        with self.lock:
            return self.scheduler.stop(request_id)

    @property
    def idle(self) -> bool:
        return not self.scheduler.running and not self.scheduler.num_waiting

    def step(self) -> StepResult:
        started = self.clock()
        with self.lock:
            plan = self.scheduler.plan_step(started)
        sampled: dict[str, int] = {}
        if plan.prefill:
            for chunk, logits in zip(plan.prefill, self._prefill(plan.prefill)):
                if chunk.reaches_end:
                    sampled[chunk.sequence.request_id] = self._sample(chunk.sequence, logits)
        if plan.decode:
            for sequence, logits in zip(plan.decode, self._decode(plan.decode)):
                sampled[sequence.request_id] = self._sample(sequence, logits)
        with self.lock:
            tokens, finished = self.scheduler.complete_step(plan, sampled, self.clock())
        finished = [*plan.finished, *finished]
        for sequence in finished:
            self._rngs.pop(sequence.request_id, None)
        return StepResult(tokens, finished, len(plan.decode), sum(c.count for c in plan.prefill), self.clock() - started)

    def _sample(self, sequence: Sequence, logits: np.ndarray) -> int:
        return sample_token(logits, sequence.request.sampling, self._rngs[sequence.request_id])

    def _prefill(self, chunks) -> np.ndarray:
        """All prefill chunks of the step in one graph call, right-padded to the longest chunk (padding
        sits after each row's real tokens, so causal attention keeps it out of them; its K/V are dropped)."""
        width = max(c.count for c in chunks)
        input_ids = np.zeros((len(chunks), width), dtype=np.int64)
        positions = np.zeros((len(chunks), width), dtype=np.int64)
        for row, chunk in enumerate(chunks):
            input_ids[row, :chunk.count] = chunk.sequence.tokens[chunk.start:chunk.start + chunk.count]
            positions[row] = np.arange(chunk.start, chunk.start + width)
        starts = [c.start for c in chunks]
        past_key, past_value, _ = self.store.gather([c.sequence.table.blocks for c in chunks], starts)
        logits, new_key, new_value = self.graph.run(input_ids, positions, past_key, past_value, np.asarray(starts, dtype=np.int64),
                                                    np.asarray([c.count - 1 for c in chunks], dtype=np.int64))
        for row, chunk in enumerate(chunks):
            self.store.write(chunk.sequence.table.blocks, chunk.start, new_key[:, row, :, :chunk.count], new_value[:, row, :, :chunk.count])
        return logits

    def _decode(self, sequences: tuple[Sequence, ...]) -> np.ndarray:
        lengths = [s.table.num_tokens for s in sequences]
        past_key, past_value, _ = self.store.gather([s.table.blocks for s in sequences], lengths)
        input_ids = np.asarray([[s.tokens[n]] for s, n in zip(sequences, lengths)], dtype=np.int64)
        positions = np.asarray(lengths, dtype=np.int64)[:, None]
        logits, new_key, new_value = self.graph.run(input_ids, positions, past_key, past_value,
                                                    np.asarray(lengths, dtype=np.int64), np.zeros(len(sequences), dtype=np.int64))
        for row, (sequence, length) in enumerate(zip(sequences, lengths)):
            self.store.write(sequence.table.blocks, length, new_key[:, row], new_value[:, row])
        return logits

    def run_until_idle(self, max_steps: int = 1_000_000) -> list[StepResult]:
        """Step until nothing runs or waits (offline use: the build's checks, benchmarks, tests)."""
        results = []
        for _ in range(max_steps):
            if self.idle:
                break
            results.append(self.step())
        return results


