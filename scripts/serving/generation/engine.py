"""Run the scheduler's steps: ONNX Runtime computes, the project's block pool holds the KV cache.

`DecoderGraph` is the thin ONNX Runtime wrapper around the exported decoder-step graph
(build/model_build/llm_graph.py documents its tensors). `GenerationEngine` does one scheduler step
per `step()` call: each prefill chunk is one graph call for its sequence; all decoding sequences
share one batched graph call (padded to the longest past, masked by `past_length`). New K/V go
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

from serving.generation.kv_store import KvStore
from serving.generation.requests import GenerationRequest
from serving.generation.sampling import new_rng, sample_token
from serving.generation.scheduler import Scheduler, Sequence


class DecoderGraph:
    """The decoder-step graph in an ONNX Runtime session (CPU, or CUDA where asked and present)."""

    def __init__(self, onnx_path: str, threads: int = 0, provider: str = "CPUExecutionProvider") -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(onnx_path, options, providers=[provider])

    def run(self, input_ids, position_ids, past_key, past_value, past_length, last_index):
        feeds = {"input_ids": input_ids, "position_ids": position_ids, "past_key": past_key, "past_value": past_value,
                 "past_length": past_length, "last_index": last_index}
        return self.session.run(["logits", "new_key", "new_value"], feeds)


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

    def submit(self, request: GenerationRequest) -> Sequence:
        with self.lock:
            sequence = self.scheduler.submit(request, self.clock())
        self._rngs[request.request_id] = new_rng(request.sampling)
        return sequence

    def cancel(self, request_id: str) -> bool:
        with self.lock:
            return self.scheduler.cancel(request_id)

    @property
    def idle(self) -> bool:
        return not self.scheduler.running and not self.scheduler.num_waiting

    def step(self) -> StepResult:
        started = self.clock()
        with self.lock:
            plan = self.scheduler.plan_step(started)
        sampled: dict[str, int] = {}
        for chunk in plan.prefill:
            logits = self._prefill(chunk.sequence, chunk.start, chunk.count)
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

    def _prefill(self, sequence: Sequence, start: int, count: int) -> np.ndarray:
        tokens = sequence.tokens[start:start + count]
        past_key, past_value, _ = self.store.gather([sequence.table.blocks], [start])
        logits, new_key, new_value = self.graph.run(
            np.asarray([tokens], dtype=np.int64), np.arange(start, start + count, dtype=np.int64)[None],
            past_key, past_value, np.asarray([start], dtype=np.int64), np.asarray([count - 1], dtype=np.int64))
        self.store.write(sequence.table.blocks, start, new_key[:, 0], new_value[:, 0])
        return logits[0]

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


