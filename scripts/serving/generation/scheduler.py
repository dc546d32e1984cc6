"""The scheduler: which sequences run in the next step, and how each one ends.

Pure bookkeeping over `kv_blocks` and `prefix_cache` (no tensors, no clock of its own: `now` is
passed in), so every rule below is unit-tested without a model.

* Continuous batching (`Policy.CONTINUOUS`): at every step, free slots (`max_running`) are filled
  from the wait queue, so a finished sequence's slot is reused at the next step. The baselines
  for the benchmark use the same code: `STATIC` admits only when the running batch has drained,
  `ONE_AT_A_TIME` runs one sequence at a time.
* Chunked prefill: a prompt is fed `prefill_chunk_tokens` at a time, so a long prompt delays the
  running sequences' next token by one chunk, not by the whole prompt.
* Priorities: the wait queue has one FIFO per level; level 1 (realtime) is admitted first. Each
  level's queue is bounded (`max_waiting`); a full one raises `WaitQueueFull` (503 / UNAVAILABLE).
* Memory: a sequence is admitted only if its whole pending prefill (plus one block to decode) fits
  in the blocks nobody else has been promised: the running sequences' unfinished prefills are
  promised theirs, so two admissions never count on the same free blocks. Blocks are allocated as
  a sequence grows. When a step finds no block for a sequence (decoding, or a prefill chunk after
  decode growth took the free ones), the most recently admitted sequence of the lowest priority,
  the one asking included, is preempted: its blocks are released and it goes back to the front of
  its wait queue with its generated tokens, to be recomputed (prefix blocks it shared stay with the
  others). So a batch sequence never evicts a realtime one, nor a newer one an older one of its
  level, and a pool with every sequence stuck mid-prefill cannot happen.
* Endings (`FinishReason`): EOS or a stop string the caller found in the text (`stop`: "stop"),
  `max_tokens` or the context ("length"), client cancellation ("cancelled"), the request's deadline
  ("deadline"); the tokens so far are kept. A request not admitted within its Triton timeout ends
  unstarted ("queue_timeout"), for the caller to answer as an error.

Token positions: a sequence's tokens are prompt + generated; `table.num_tokens` of them have K/V
in the cache and the rest are *pending*. A step feeds a sequence's pending tokens (a chunk of them
while prefilling, exactly one while decoding) and samples a token when the feed reached the end.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable, Mapping

from serving.generation.errors import GenerationError, OutOfKvBlocks, WaitQueueFull
from serving.generation.kv_blocks import BlockAllocator, BlockTable, blocks_for_tokens
from serving.generation.prefix_cache import PrefixCache
from serving.generation.requests import GenerationRequest


class Policy(str, Enum):
    CONTINUOUS = "continuous"
    STATIC = "static"
    ONE_AT_A_TIME = "one_at_a_time"


class FinishReason(str, Enum):
    STOP = "stop"
    LENGTH = "length"
    CANCELLED = "cancelled"
    DEADLINE = "deadline"
    #: Never admitted within the request's Triton timeout (its `timeout`): answered as Triton answers
    #: a batched model's queue timeout, with an UNAVAILABLE error, not with text.
    QUEUE_TIMEOUT = "queue_timeout"


@dataclass(frozen=True)
class SchedulerConfig:
    num_blocks: int
    block_size: int = 16
    max_running: int = 8
    max_context: int = 1024
    prefill_chunk_tokens: int = 64
    #: priority level -> how many requests may wait at that level.
    max_waiting: Mapping[int, int] = field(default_factory=lambda: {1: 24, 2: 256})
    policy: Policy = Policy.CONTINUOUS
    prefix_sharing: bool = True
    eos_token_ids: tuple[int, ...] = (2,)
    #: A waiting sequence of a higher priority (realtime) that finds every slot, or the KV blocks it
    #: needs, taken preempts the newest running sequences of lower priority (they wait again at the
    #: head of their queue and recompute; their tokens are kept), as vLLM's priority scheduling does.
    #: False: once admitted, a sequence runs to its end (realtime only goes first in the queue).
    priority_preemption: bool = True

    def __post_init__(self) -> None:
        for name in ("num_blocks", "block_size", "max_running", "max_context", "prefill_chunk_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise GenerationError(f"scheduler `{name}` = {value!r}: expected an integer >= 1.")
        if not self.max_waiting or any(size < 1 for size in self.max_waiting.values()):
            raise GenerationError(f"scheduler `max_waiting` = {dict(self.max_waiting)}: expected a queue size >= 1 per priority level.")
        if self.num_blocks < blocks_for_tokens(self.max_context, self.block_size):
            raise GenerationError(
                f"scheduler `num_blocks` = {self.num_blocks} cannot hold one sequence of the full context "
                f"({self.max_context} tokens = {blocks_for_tokens(self.max_context, self.block_size)} blocks of {self.block_size}).")
        object.__setattr__(self, "policy", Policy(self.policy))


class Sequence:
    """One request's state while it waits, runs and finishes."""

    def __init__(self, request: GenerationRequest, arrival: float, block_size: int) -> None:
        self.request = request
        self.arrival = arrival
        self.deadline = None if request.deadline_s is None else arrival + request.deadline_s
        self.admit_by = None if request.queue_timeout_s is None else arrival + request.queue_timeout_s
        self.table = BlockTable(block_size)
        self.generated: list[int] = []
        self.finish_reason: FinishReason | None = None
        self.cancel_requested = False
        #: A stop string appeared in the text (found by the caller, who detokenizes): ends as STOP.
        self.stop_requested = False
        self.admitted_at: float | None = None
        #: Order of first admission (0, 1, ...): orders admissions where `admitted_at` ties (one step admits several).
        self.admission_index: int | None = None
        self.first_token_at: float | None = None
        self.cached_prompt_tokens = 0
        self.preemptions = 0

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def tokens(self) -> list[int]:
        return [*self.request.prompt, *self.generated]

    @property
    def num_pending(self) -> int:
        return len(self.request.prompt) + len(self.generated) - self.table.num_tokens

    @property
    def decoding(self) -> bool:
        return bool(self.generated) and self.num_pending == 1


@dataclass(frozen=True)
class PrefillChunk:
    sequence: Sequence
    start: int
    count: int

    @property
    def reaches_end(self) -> bool:
        return self.start + self.count == len(self.sequence.request.prompt) + len(self.sequence.generated)


@dataclass(frozen=True)
class StepPlan:
    prefill: tuple[PrefillChunk, ...]
    decode: tuple[Sequence, ...]
    finished: tuple[Sequence, ...]

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.allocator = BlockAllocator(config.num_blocks)
        self.prefix_cache = PrefixCache(self.allocator, config.block_size, enabled=config.prefix_sharing)
        self.waiting: dict[int, deque[Sequence]] = {level: deque() for level in sorted(config.max_waiting)}
        self.running: list[Sequence] = []
        self._by_id: dict[str, Sequence] = {}
        #: Sequences admitted so far (each counted at its first admission).
        self.admissions = 0
        #: Preemptions so far, by reason: "kv_blocks" (the cache ran out), "priority" (a realtime request took the place).
        self.preemptions = {"kv_blocks": 0, "priority": 0}

    # ------------------------------------------------------------------ intake
    @property
    def num_waiting(self) -> int:
        return sum(len(queue) for queue in self.waiting.values())

    def submit(self, request: GenerationRequest, now: float) -> Sequence:
        queue = self.waiting.get(request.priority)
        if queue is None:
            raise GenerationError(f"priority {request.priority} is not a level of this scheduler: {sorted(self.waiting)}.")
        if len(queue) >= self.config.max_waiting[request.priority]:
            raise WaitQueueFull(f"the wait queue of priority {request.priority} is full "
                                f"({self.config.max_waiting[request.priority]} requests): retry later.")
        if request.request_id in self._by_id:
            raise GenerationError(f"request id {request.request_id!r} is already being generated.")
        sequence = Sequence(request, now, self.config.block_size)
        queue.append(sequence)
        self._by_id[request.request_id] = sequence
        return sequence

    def cancel(self, request_id: str) -> bool:
        """End a sequence as cancelled at the next step (the client went away)."""
        return self._flag(request_id, "cancel_requested")

    def stop(self, request_id: str) -> bool:
        """End a sequence as if it had sampled EOS (a stop string appeared in its text)."""
        return self._flag(request_id, "stop_requested")

    def _flag(self, request_id: str, flag: str) -> bool:
        sequence = self._by_id.get(request_id)
        if sequence is not None:
            setattr(sequence, flag, True)
        return sequence is not None

    # ------------------------------------------------------------------ planning
    def plan_step(self, now: float) -> StepPlan:
        finished = [self._finish(s, reason) for s, reason in self._expired(now)]
        self._admit(now)
        decode = self._plan_decode()
        prefill = self._plan_prefill(decode)
        return StepPlan(tuple(prefill), tuple(decode), tuple(finished))

    def _expired(self, now: float) -> list[tuple[Sequence, FinishReason]]:
        ended = []
        for sequence in [*self.running, *(s for q in self.waiting.values() for s in q)]:
            if sequence.cancel_requested:
                ended.append((sequence, FinishReason.CANCELLED))
            elif sequence.stop_requested:
                ended.append((sequence, FinishReason.STOP))
            elif sequence.deadline is not None and now >= sequence.deadline:
                ended.append((sequence, FinishReason.DEADLINE))
            elif sequence.admitted_at is None and sequence.admit_by is not None and now >= sequence.admit_by:
                ended.append((sequence, FinishReason.QUEUE_TIMEOUT))
        return ended

    def _next_waiting(self) -> Sequence | None:
        for queue in self.waiting.values():  # levels in ascending order: 1 (realtime) first
            if queue:
                return queue[0]
        return None

    def _slots(self) -> int:
        if self.config.policy is Policy.CONTINUOUS:
            return self.config.max_running - len(self.running)
        if self.running:
            return 0  # static and one-at-a-time admit only when the batch has drained
        return self.config.max_running if self.config.policy is Policy.STATIC else 1

    def _blocks_for_prefill(self, sequence: Sequence) -> int:
        """Blocks a sequence holds once its whole prefill is computed, plus one to decode."""
        return blocks_for_tokens(len(sequence.tokens) + 1, self.config.block_size)

    def _blocks_to_finish_prefill(self, sequence: Sequence) -> int:
        """Blocks a running sequence's pending prefill will still allocate (plus one to decode)."""
        return 0 if sequence.decoding else max(0, self._blocks_for_prefill(sequence) - len(sequence.table.blocks))

    def _admit(self, now: float) -> None:
        free_slots = max(0, self._slots())
        while (sequence := self._next_waiting()) is not None:
            if free_slots <= 0:
                if not self._preempt_below(sequence):
                    return
                free_slots += 1
            tokens = sequence.tokens
            shared = self.prefix_cache.match(tokens)
            # Admit only if its whole pending prefill can get blocks now (plus one to decode), from
            # the blocks not already promised to the running sequences' prefills.
            needed = self._blocks_for_prefill(sequence) - len(shared)
            while needed > self.allocator.num_free - sum(self._blocks_to_finish_prefill(s) for s in self.running):
                if not self._preempt_below(sequence):
                    for block in shared:
                        self.allocator.release(block)
                    return
            self.waiting[sequence.request.priority].popleft()
            sequence.table.blocks = list(shared)
            sequence.table.num_tokens = len(shared) * self.config.block_size
            if sequence.admitted_at is None:  # counted once: a preempted sequence is admitted again
                self.prefix_cache.count_admitted(len(tokens), len(shared))
                sequence.admitted_at, sequence.admission_index = now, self.admissions
                self.admissions += 1
                sequence.cached_prompt_tokens = sequence.table.num_tokens
            self.running.append(sequence)
            free_slots -= 1

    def _plan_decode(self) -> list[Sequence]:
        decode = []
        for sequence in list(self.running):
            if sequence not in self.running or not sequence.decoding:
                continue
            if self._grow_or_preempt(sequence, 1, decode, []):
                decode.append(sequence)
        return decode

    def _plan_prefill(self, decode: list[Sequence]) -> list[PrefillChunk]:
        """This step's prefill chunks, within `prefill_chunk_tokens`: the prompts of the highest
        priority first, then in the order they were admitted (as vLLM's priority policy orders its
        running queue). Why: in admission order, a realtime prompt admitted behind two batch prompts of
        1,000 tokens waited for both to be prefilled: its first token at step 31 instead of 2, 3.5 s
        instead of 0.1 s on a live server (a review, 2026-12-07); the free slots it was admitted to
        never triggered a preemption."""
        chunks: list[PrefillChunk] = []
        for sequence in sorted(self.running, key=lambda s: (s.request.priority, s.admission_index or 0)):
            budget = self.config.prefill_chunk_tokens - sum(c.count for c in chunks)
            if budget <= 0:
                break
            if sequence not in self.running or sequence.decoding or sequence.num_pending == 0:
                continue
            count = min(sequence.num_pending, budget)
            if self._grow_or_preempt(sequence, count, decode, chunks):
                chunks.append(PrefillChunk(sequence, sequence.table.num_tokens, count))
        return chunks

    def _grow_or_preempt(self, sequence: Sequence, new_tokens: int, decode: list[Sequence],
                         chunks: list[PrefillChunk]) -> bool:
        """Allocate `sequence`'s blocks for `new_tokens`, preempting the lowest-priority newest running
        sequences until they fit. False if `sequence` was that one itself (it waits, its blocks freed).
        A victim already planned for this step (in `decode` or `chunks`) is taken out of the plan."""
        while True:
            try:
                sequence.table.grow(self.allocator, new_tokens)
                return True
            except OutOfKvBlocks:
                victim = self._preemption_victim()
                self._preempt(victim, "kv_blocks")
                decode[:] = [s for s in decode if s is not victim]
                chunks[:] = [c for c in chunks if c.sequence is not victim]
                if victim is sequence:
                    return False

    def _preemption_victim(self) -> Sequence:
        """The most recently admitted running sequence of the lowest priority (the one asking for
        blocks included: a batch sequence never evicts a realtime one, a newer one never an older one)."""
        return max(self.running, key=lambda s: (s.request.priority, s.admission_index or 0))

    def _preempt_below(self, waiting: Sequence) -> bool:
        """Preempt the newest running sequence of a lower priority than `waiting` (continuous batching
        with `priority_preemption`); False when there is none."""
        if not self.config.priority_preemption or self.config.policy is not Policy.CONTINUOUS:
            return False
        lower = [s for s in self.running if s.request.priority > waiting.request.priority]
        if not lower:
            return False
        self._preempt(max(lower, key=lambda s: (s.request.priority, s.admission_index or 0)), "priority")
        return True

    def _preempt(self, sequence: Sequence, reason: str) -> None:
        self.preemptions[reason] += 1
        self.running.remove(sequence)
        sequence.table.release_all(self.allocator)
        sequence.preemptions += 1
        self.waiting[sequence.request.priority].appendleft(sequence)

    # ------------------------------------------------------------------ results
    def complete_step(self, plan: StepPlan, sampled: Mapping[str, int], now: float) -> tuple[list[tuple[Sequence, int]], list[Sequence]]:
        """Record what a step computed. `sampled` maps request id -> token for each sequence whose
        feed reached its end. Returns (new tokens to emit, sequences finished now)."""
        for chunk in plan.prefill:
            chunk.sequence.table.num_tokens += chunk.count
            self.prefix_cache.insert(chunk.sequence.request.prompt, chunk.sequence.table.blocks, chunk.sequence.table.num_tokens)
        for sequence in plan.decode:
            sequence.table.num_tokens += 1
        emitted, finished = [], []
        fed = [c.sequence for c in plan.prefill if c.reaches_end] + list(plan.decode)
        for sequence in fed:
            token = sampled.get(sequence.request_id)
            if token is None or sequence.finish_reason is not None:
                continue
            reason = self._append(sequence, token, now)
            if reason is not FinishReason.STOP:
                emitted.append((sequence, token))
            if reason is not None:
                finished.append(self._finish(sequence, reason))
        return emitted, finished

    def _append(self, sequence: Sequence, token: int, now: float) -> FinishReason | None:
        if sequence.first_token_at is None:
            sequence.first_token_at = now
        sampling = sequence.request.sampling
        if token in self.config.eos_token_ids and not sampling.ignore_eos:
            return FinishReason.STOP
        sequence.generated.append(token)
        if len(sequence.generated) >= sampling.max_tokens or len(sequence.tokens) >= self.config.max_context:
            return FinishReason.LENGTH
        return None

    def _finish(self, sequence: Sequence, reason: FinishReason) -> Sequence:
        sequence.finish_reason = reason
        if sequence in self.running:
            self.running.remove(sequence)
        else:
            queue = self.waiting[sequence.request.priority]
            if sequence in queue:
                queue.remove(sequence)
        sequence.table.release_all(self.allocator)
        self._by_id.pop(sequence.request_id, None)
        return sequence

    def all_sequences(self) -> Iterable[Sequence]:
        return list(self._by_id.values())
