"""The scheduler's rules (serving.generation.scheduler), driven without a model: a fake step
'samples' token 7 (or EOS where a test asks for it) for every sequence whose feed reached its end."""
from __future__ import annotations

import pytest

from serving.generation.errors import GenerationError, WaitQueueFull
from serving.generation.requests import GenerationRequest, SamplingParams
from serving.generation.scheduler import FinishReason, Policy, Scheduler, SchedulerConfig

EOS = 2


def make(num_blocks=64, **kwargs):
    settings = dict(num_blocks=num_blocks, block_size=4, max_running=2, max_context=64, prefill_chunk_tokens=8,
                    max_waiting={1: 2, 2: 4}, eos_token_ids=(EOS,))
    settings.update(kwargs)
    return Scheduler(SchedulerConfig(**settings))


def request(rid, prompt_len=5, max_tokens=3, priority=2, deadline_s=None, prompt=None):
    return GenerationRequest(rid, tuple(prompt or range(10, 10 + prompt_len)), SamplingParams(max_tokens=max_tokens), priority, deadline_s)


def step(scheduler, now=0.0, token=7, eos_for=()):
    plan = scheduler.plan_step(now)
    fed = [c.sequence for c in plan.prefill if c.reaches_end] + list(plan.decode)
    sampled = {s.request_id: (EOS if s.request_id in eos_for else token) for s in fed}
    emitted, finished = scheduler.complete_step(plan, sampled, now)
    return plan, emitted, [*plan.finished, *finished]


def run_all(scheduler, limit=200):
    done = []
    for i in range(limit):
        if not scheduler.running and not scheduler.num_waiting:
            break
        done += step(scheduler, now=float(i))[2]
    return done


def test_config_rejects_too_few_blocks_for_one_full_context_sequence():
    with pytest.raises(GenerationError, match="cannot hold one sequence of the full context"):
        SchedulerConfig(num_blocks=3, block_size=4, max_context=64)


def test_a_request_generates_max_tokens_and_frees_its_blocks():
    scheduler = make()
    sequence = scheduler.submit(request("a", max_tokens=3), 0.0)
    finished = run_all(scheduler)
    assert finished == [sequence] and sequence.finish_reason is FinishReason.LENGTH
    assert sequence.generated == [7, 7, 7]
    assert scheduler.allocator.num_used == 0


def test_eos_ends_with_stop_and_is_not_part_of_the_output():
    scheduler = make()
    sequence = scheduler.submit(request("a", max_tokens=10), 0.0)
    step(scheduler)  # prefill + first token
    _, emitted, finished = step(scheduler, eos_for={"a"})
    assert finished == [sequence] and sequence.finish_reason is FinishReason.STOP
    assert emitted == [] and sequence.generated == [7]


def test_long_prompts_are_prefilled_in_chunks():
    scheduler = make(prefill_chunk_tokens=8)
    scheduler.submit(request("a", prompt_len=20), 0.0)
    counts = [sum(c.count for c in step(scheduler)[0].prefill) for _ in range(3)]
    assert counts == [8, 8, 4]


def test_continuous_batching_admits_a_waiting_request_as_soon_as_a_slot_frees():
    scheduler = make(max_running=2)
    scheduler.submit(request("short", max_tokens=1), 0.0)
    scheduler.submit(request("long", max_tokens=10), 0.0)
    scheduler.submit(request("next", max_tokens=2), 0.0)
    step(scheduler)  # both prefill; "short" finishes after its first token
    plan, _, _ = step(scheduler)
    assert "next" in {c.sequence.request_id for c in plan.prefill}  # admitted while "long" still runs


def test_static_batching_admits_only_after_the_batch_has_drained():
    scheduler = make(max_running=2, policy=Policy.STATIC)
    scheduler.submit(request("short", max_tokens=1), 0.0)
    scheduler.submit(request("long", max_tokens=4), 0.0)
    scheduler.submit(request("next", max_tokens=2), 0.0)
    admitted_at = {}
    for i in range(12):
        plan, _, _ = step(scheduler, now=float(i))
        for chunk in plan.prefill:
            admitted_at.setdefault(chunk.sequence.request_id, i)
    assert admitted_at["next"] > 3  # waited until "long" finished its 4 tokens


def test_one_at_a_time_runs_a_single_sequence():
    scheduler = make(max_running=4, policy=Policy.ONE_AT_A_TIME)
    for rid in "abc":
        scheduler.submit(request(rid), 0.0)
    for i in range(20):
        step(scheduler, now=float(i))
        assert len(scheduler.running) <= 1


def test_realtime_priority_is_admitted_before_earlier_batch_requests():
    scheduler = make(max_running=1)
    scheduler.submit(request("batch", priority=2), 0.0)
    scheduler.submit(request("realtime", priority=1), 1.0)
    plan, _, _ = step(scheduler, now=1.0)
    assert [c.sequence.request_id for c in plan.prefill] == ["realtime"]


def test_a_full_wait_queue_raises_wait_queue_full_per_priority_level():
    scheduler = make(max_waiting={1: 1, 2: 1})
    scheduler.submit(request("a", priority=2), 0.0)
    with pytest.raises(WaitQueueFull, match="priority 2 is full"):
        scheduler.submit(request("b", priority=2), 0.0)
    scheduler.submit(request("c", priority=1), 0.0)  # the realtime queue still has room


def test_cancellation_ends_a_running_sequence_and_frees_its_blocks():
    scheduler = make()
    sequence = scheduler.submit(request("a", max_tokens=10), 0.0)
    step(scheduler)
    step(scheduler)
    assert scheduler.cancel("a")
    _, _, finished = step(scheduler)
    assert finished == [sequence] and sequence.finish_reason is FinishReason.CANCELLED
    assert sequence.generated == [7, 7] and scheduler.allocator.num_used == 0


def test_a_waiting_request_can_be_cancelled_too():
    scheduler = make(max_running=1)
    scheduler.submit(request("a", max_tokens=10), 0.0)
    waiting = scheduler.submit(request("b"), 0.0)
    scheduler.cancel("b")
    _, _, finished = step(scheduler)
    assert waiting in finished and scheduler.num_waiting == 0


def test_deadline_returns_the_tokens_so_far_with_finish_reason_deadline():
    scheduler = make()
    sequence = scheduler.submit(request("a", max_tokens=50, deadline_s=2.5), 0.0)
    for now in (0.0, 1.0, 2.0):
        step(scheduler, now=now)
    _, _, finished = step(scheduler, now=3.0)
    assert finished == [sequence] and sequence.finish_reason is FinishReason.DEADLINE
    assert len(sequence.generated) == 3


def test_a_request_not_admitted_within_its_triton_timeout_ends_with_queue_timeout_and_an_admitted_one_never_does():
    """The request's Triton `timeout` bounds its wait for a slot, as the dynamic batcher's queue does."""
    from dataclasses import replace

    scheduler = make(max_running=1)
    running = scheduler.submit(replace(request("a", max_tokens=50), queue_timeout_s=0.5), 0.0)
    waiting = scheduler.submit(replace(request("b", max_tokens=3), queue_timeout_s=1.5), 0.0)
    step(scheduler, now=0.0)
    _, _, finished = step(scheduler, now=1.0)
    assert finished == [] and running.admitted_at == 0.0  # admitted at once: its timeout no longer applies
    _, _, finished = step(scheduler, now=2.0)
    assert finished == [waiting] and waiting.finish_reason is FinishReason.QUEUE_TIMEOUT and not waiting.generated
    assert running.finish_reason is None


def test_context_limit_ends_with_length():
    scheduler = make(max_context=12)
    sequence = scheduler.submit(request("a", prompt_len=10, max_tokens=50), 0.0)
    run_all(scheduler)
    assert sequence.finish_reason is FinishReason.LENGTH and len(sequence.tokens) == 12


def test_shared_system_prompt_blocks_are_reused_by_the_next_request():
    scheduler = make(max_running=1)
    system = list(range(100, 112))  # three full blocks of 4
    first = scheduler.submit(request("a", prompt=system + [1, 2]), 0.0)
    run_all(scheduler)
    second = scheduler.submit(request("b", prompt=system + [3, 4, 5]), 10.0)
    plan, _, _ = step(scheduler, now=10.0)
    assert second.cached_prompt_tokens == 12
    assert plan.prefill[0].start == 12 and plan.prefill[0].count == 3
    assert first.finish_reason is FinishReason.LENGTH


def test_out_of_blocks_preempts_the_newest_batch_sequence_and_recomputes_it():
    scheduler = make(num_blocks=16, max_running=3, max_context=64, prefill_chunk_tokens=64)
    sequences = [scheduler.submit(request(rid, prompt_len=15, max_tokens=12), 0.0) for rid in "abc"]
    finished = run_all(scheduler)
    assert {s.request_id for s in finished} == {"a", "b", "c"}
    assert all(s.generated == [7] * 12 for s in sequences)
    assert sum(s.preemptions for s in sequences) >= 1
    assert scheduler.preemptions["kv_blocks"] == sum(s.preemptions for s in sequences) and scheduler.preemptions["priority"] == 0
    assert scheduler.allocator.num_used == 0


def test_many_mixed_requests_leave_no_block_in_use():
    scheduler = make(num_blocks=40, max_running=4, max_waiting={1: 200, 2: 200})
    for i in range(300):
        scheduler.submit(request(f"r{i}", prompt_len=3 + i % 13, max_tokens=1 + i % 7, priority=1 + i % 2,
                                 prompt=[1, 2, 3, 4, 5, 6, 7, 8] + [i % 5] * (i % 9 + 1)), 0.0)
        if i % 3 == 0:
            scheduler.cancel(f"r{i}")
    done = run_all(scheduler, limit=5000)
    assert len(done) == 300 and scheduler.allocator.num_used == 0


def test_a_batch_sequence_short_of_blocks_never_preempts_a_realtime_one():
    """The victim used to be chosen among the OTHER running sequences: a batch sequence needing a
    block evicted a realtime one (the requester is now a candidate too, and the lowest-priority one)."""
    scheduler = make(num_blocks=4, max_running=8, max_context=16, prefill_chunk_tokens=64)
    realtime = scheduler.submit(request("realtime", prompt_len=5, max_tokens=8, priority=1), 0.0)
    batch = scheduler.submit(request("batch", prompt_len=7, max_tokens=8, priority=2), 0.0)
    for i in range(40):
        step(scheduler, now=float(i))
        assert realtime.preemptions == 0
        if realtime.finish_reason is not None:
            break
    assert realtime.finish_reason is FinishReason.LENGTH and realtime.generated == [7] * 8
    assert batch.preemptions >= 1
    run_all(scheduler)
    assert batch.finish_reason is FinishReason.LENGTH and scheduler.allocator.num_used == 0


def test_a_pool_with_every_running_sequence_mid_prefill_does_not_stall():
    """The served shape (16-token blocks, 64-token chunks, 1024 context, 8 slots) on the smallest pool
    sizing allows (64 blocks): admissions used to count on the same free blocks and a prefill chunk
    that found none waited forever (2,010 steps with nothing computed, free blocks 0)."""
    scheduler = make(num_blocks=64, block_size=16, max_running=8, max_context=1024, prefill_chunk_tokens=64,
                     max_waiting={1: 8, 2: 8})
    arrivals = {14: [(0, 647, 292)], 33: [(3, 786, 135), (4, 295, 388)], 34: [(1, 321, 53)], 40: [(5, 394, 283)],
                51: [(2, 887, 88)]}
    sequences, idle = [], 0
    for now in range(6000):
        for n, prompt_len, max_tokens in arrivals.get(now, ()):
            prompt = range(1000 * n + 3, 1000 * n + 3 + prompt_len)
            sequences.append(scheduler.submit(request(f"r{n}", max_tokens=max_tokens, prompt=prompt), float(now)))
        plan, _, finished = step(scheduler, now=float(now))
        idle = idle + 1 if plan.empty and not finished and now > 51 else 0
        assert idle < 3, f"step {now}: nothing computed for {idle} steps, {scheduler.allocator.num_free} blocks free"
        if now > 51 and not scheduler.running and not scheduler.num_waiting:
            break
    assert [s.finish_reason for s in sequences] == [FinishReason.LENGTH] * 6
    assert scheduler.allocator.num_used == 0


def test_prefix_cache_hits_are_counted_once_per_admitted_request_not_per_step_waited():
    scheduler = make(num_blocks=6, max_running=2, max_context=16, prefill_chunk_tokens=64)
    system = list(range(100, 108))  # two full blocks of 4
    first = scheduler.submit(request("first", max_tokens=2, prompt=system + [1, 2]), 0.0)
    for i in range(4):
        step(scheduler, now=float(i))
    assert first.finish_reason is not None
    big = scheduler.submit(request("big", max_tokens=8, prompt=list(range(200, 211))), 10.0)  # holds 4 of 6 blocks
    second = scheduler.submit(request("second", max_tokens=2, prompt=system + [3, 4]), 10.0)
    for i in range(10, 20):  # `second` waits for blocks for several of these steps
        step(scheduler, now=float(i))
    run_all(scheduler)
    assert big.finish_reason is second.finish_reason is FinishReason.LENGTH
    stats = scheduler.prefix_cache.stats
    assert stats.lookups == 3 and stats.looked_up_tokens == 10 + 11 + 10


def test_a_stop_string_found_by_the_caller_ends_the_sequence_as_stop_before_another_token():
    scheduler = make()
    sequence = scheduler.submit(request("a", max_tokens=50), 0.0)
    step(scheduler, now=0.0)
    step(scheduler, now=1.0)
    generated = len(sequence.generated)
    assert scheduler.stop("a") and not scheduler.stop("nobody")
    _, _, finished = step(scheduler, now=2.0)
    assert finished == [sequence] and sequence.finish_reason is FinishReason.STOP and len(sequence.generated) == generated


def test_of_two_sequences_admitted_in_one_step_the_later_one_is_preempted():
    """`admitted_at` ties when one step admits both: max() then took the first of `running`, the
    older one, against the rule that a newer sequence never evicts an older one."""
    scheduler = make(num_blocks=4, prefill_chunk_tokens=16, max_context=16, max_waiting={2: 4}, prefix_sharing=False)
    old = scheduler.submit(request("old", prompt_len=3, max_tokens=12), 0.0)
    new = scheduler.submit(request("new", prompt_len=3, max_tokens=12), 0.0)
    for t in range(12):
        step(scheduler, float(t))
        if old.preemptions or new.preemptions:
            break
    assert (old.preemptions, new.preemptions) == (0, 1)
    assert old.admission_index == 0 and new.admission_index == 1


def test_a_preempted_sequence_is_counted_once_by_the_prefix_cache():
    scheduler = make(num_blocks=4, prefill_chunk_tokens=16, max_context=16, max_waiting={2: 4})
    old = scheduler.submit(request("old", prompt_len=5, max_tokens=11), 0.0)
    new = scheduler.submit(request("new", prompt_len=5, max_tokens=11), 1.0)
    t = 0
    while scheduler.running or scheduler.num_waiting:
        step(scheduler, float(t))
        t += 1
    assert old.preemptions + new.preemptions >= 1
    stats = scheduler.prefix_cache.stats
    assert (stats.lookups, stats.looked_up_tokens) == (2, 10)  # re-admission counted 3 lookups and 19 tokens


def test_a_realtime_request_finding_every_slot_taken_preempts_the_newest_batch_sequence():
    """Realtime used to go first only in the queue: with every slot taken by batch sequences it waited
    for one of them to finish (their full max_tokens). Now the newest batch sequence is preempted (it
    waits again at the head of the batch queue, its tokens kept) and still finishes whole."""
    scheduler = make(max_running=2)
    older, newer = (scheduler.submit(request(rid, max_tokens=20), 0.0) for rid in ("older", "newer"))
    step(scheduler, now=0.0)
    assert scheduler.running == [older, newer]
    realtime = scheduler.submit(request("realtime", max_tokens=3, priority=1), 1.0)
    step(scheduler, now=1.0)
    assert realtime in scheduler.running and older in scheduler.running and newer not in scheduler.running
    assert newer.preemptions == 1 and scheduler.waiting[2][0] is newer and older.preemptions == 0
    assert scheduler.preemptions == {"kv_blocks": 0, "priority": 1}
    run_all(scheduler)
    assert realtime.generated == [7] * 3 and older.generated == newer.generated == [7] * 20
    assert scheduler.allocator.num_used == 0


def test_a_realtime_request_short_of_kv_blocks_preempts_batch_work_for_them():
    scheduler = make(num_blocks=16, max_running=4, max_context=64, prefill_chunk_tokens=64)
    distinct = {rid: [100 * n + i for i in range(23)] for n, rid in enumerate(("a", "b", "realtime"), start=1)}  # no shared prefix
    batch = [scheduler.submit(request(rid, max_tokens=30, prompt=distinct[rid]), 0.0) for rid in "ab"]
    step(scheduler, now=0.0)  # two sequences of 24+ tokens hold 12 of the 16 blocks, slots are free
    realtime = scheduler.submit(request("realtime", max_tokens=2, priority=1, prompt=distinct["realtime"]), 1.0)
    step(scheduler, now=1.0)
    assert realtime in scheduler.running and batch[1].preemptions == 1 and batch[0].preemptions == 0
    run_all(scheduler)
    assert all(s.finish_reason is FinishReason.LENGTH for s in [realtime, *batch]) and scheduler.allocator.num_used == 0


@pytest.mark.parametrize("settings", [{"priority_preemption": False}, {"policy": Policy.STATIC}])
def test_without_priority_preemption_or_continuous_batching_a_running_sequence_runs_to_its_end(settings):
    scheduler = make(max_running=2, **settings)
    batch = [scheduler.submit(request(rid, max_tokens=20), 0.0) for rid in "ab"]
    step(scheduler, now=0.0)
    realtime = scheduler.submit(request("realtime", max_tokens=3, priority=1), 1.0)
    step(scheduler, now=1.0)
    assert realtime not in scheduler.running and all(s.preemptions == 0 for s in batch)


def test_a_realtime_prompt_is_prefilled_before_the_older_batch_prompts_beside_it():
    """Free slots, so no preemption: the prefill budget itself goes to the highest priority first
    (in admission order, a realtime prompt behind two long batch prompts got its first token at
    step 31 of the served settings instead of step 2: a review, 2026-12-07)."""
    scheduler = make(max_running=4, prefill_chunk_tokens=8, max_context=64)
    scheduler.submit(request("batch-1", prompt_len=40), 0.0)
    scheduler.submit(request("batch-2", prompt_len=40), 0.0)
    step(scheduler, now=0.0)
    scheduler.submit(request("realtime", priority=1, prompt=tuple(range(100, 106))), 1.0)
    plan, emitted, _ = step(scheduler, now=1.0)
    assert [(c.sequence.request_id, c.count) for c in plan.prefill] == [("realtime", 6), ("batch-1", 2)]
    assert [s.request_id for s, _ in emitted] == ["realtime"]
    finished = run_all(scheduler)  # the batch prompts still finish, and every block comes back
    assert {s.request_id for s in finished} == {"batch-1", "batch-2", "realtime"}
    assert scheduler.allocator.num_used == 0
