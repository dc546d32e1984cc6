"""Queue policies, priorities, the starvation bound and the overload stages, on a real tritonserver.

The module starts its own tritonserver on free ports with `batch_probe` models (a Python-backend
model that sleeps a fixed time per batch and reports each request's execution), rendered from
validated ServingSpecs with small queues. Every request is accounted for: an answer, or an
explicit error of the expected kind. Figures are printed (run with -s to see them).
"""
from __future__ import annotations

import asyncio
import random
import statistics
import time
from dataclasses import dataclass

import numpy as np
import pytest

from model_client.aio import AsyncResilientClient, AsyncTritonModelClient, InferenceJob, infer_concurrently
from model_client.errors import ClientError, OverloadedError, QueueTimeoutError
from model_client.policies import NO_RETRY, FallbackPolicy, RetryPolicy
from probe_repository import ProbeModel, write_probe_repository
from contracts.starvation import lowest_priority_progress_bound

# Latency ratios and timing bounds: `make test` runs this file alone, after the parallel phase.
pytestmark = [pytest.mark.server, pytest.mark.alone]

#: Full-queue and timeout tests; also the full fallback of overload stage 3.
TINY = ProbeModel("probe_tiny", max_batch_size=4, realtime_queue=1, batch_queue=2, sleep_ms=400)
#: Saturation: realtime holds <= 4 of every 8 slots, so batch keeps >= 4 per batch.
PRIORITY = ProbeModel("probe_priority", max_batch_size=8, realtime_queue=4, batch_queue=16, sleep_ms=40,
                      max_queue_delay_us=2000)
#: Overload stages: a slow main model and a faster, roomier fallback.
STAGE_MAIN = ProbeModel("stage_main", max_batch_size=4, realtime_queue=2, batch_queue=2, sleep_ms=150)
STAGE_SMALL = ProbeModel("stage_small", max_batch_size=8, realtime_queue=6, batch_queue=2, sleep_ms=20)
PROBES = (TINY, PRIORITY, STAGE_MAIN, STAGE_SMALL)


@pytest.fixture(scope="module")
def probe_server(tmp_path_factory):
    from conftest import start_test_server

    workdir = tmp_path_factory.mktemp("probe_server")
    repository = write_probe_repository(workdir / "repository", PROBES)
    server = start_test_server(workdir, tuple(p.name for p in PROBES), repository=repository)
    yield server
    server.discard()


@dataclass(frozen=True)
class ProbeAnswer:
    tag: float
    sent_ns: int
    done_ns: int
    execution: int | None = None
    start_ns: int | None = None
    batch_items: int | None = None
    tagged_items: int | None = None
    error: ClientError | None = None

    @property
    def latency_s(self) -> float:
        return (self.done_ns - self.sent_ns) / 1e9


async def probe_call(client: AsyncTritonModelClient, model: str, tag: float, priority: int,
                     timeout_us: int | None = None) -> ProbeAnswer:
    sent = time.monotonic_ns()
    try:
        out = await client.infer(model, {"tag": np.array([[tag]], np.float32)}, priority=priority, timeout_us=timeout_us)
    except ClientError as exc:
        return ProbeAnswer(tag, sent, time.monotonic_ns(), error=exc)
    answer = ProbeAnswer(tag, sent, time.monotonic_ns(), int(out["execution"][0, 0]), int(out["start_ns"][0, 0]),
                         int(out["batch_items"][0, 0]), int(out["tagged_items"][0, 0]))
    assert out["tag_out"][0, 0] == np.float32(tag), "an answer must be for its own request"
    return answer


# ---------------------------------------------------------------------------- queue policies
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_full_queue_answers_503_or_unavailable_at_once(probe_server, protocol):
    """10 requests at once into a 400 ms model whose batch level queues 2: the excess is rejected
    immediately (before the running batch ends), with the protocol's overload status."""
    from tritonclient.utils import InferenceServerException

    module = __import__(f"tritonclient.{protocol}.aio", fromlist=["aio"])
    expected_status = "503" if protocol == "http" else "StatusCode.UNAVAILABLE"

    async def main():
        client = module.InferenceServerClient(probe_server.url(protocol))

        async def one(i):
            tag = 2 + i / 100
            tensor = module.InferInput("tag", [1, 1], "FP32")
            tensor.set_data_from_numpy(np.array([[tag]], np.float32))
            start = time.monotonic()
            try:
                result = await client.infer(TINY.name, [tensor], priority=2)
                return "ok", float(result.as_numpy("tag_out")[0, 0]) == np.float32(tag), time.monotonic() - start
            except InferenceServerException as exc:
                return "rejected", (exc.status(), exc.message()), time.monotonic() - start
        try:
            return await asyncio.gather(*(one(i) for i in range(10)))
        finally:
            await client.close()

    results = asyncio.run(main())
    answered = [r for r in results if r[0] == "ok"]
    rejected = [r for r in results if r[0] == "rejected"]
    assert len(answered) + len(rejected) == 10
    assert 1 <= len(answered) <= 1 + 2 + 1, "running batch + queue (+1 if the first batch ended mid-burst)"
    assert all(echo_ok for _, echo_ok, _ in answered)
    assert rejected and all(status == expected_status and "Exceeds maximum queue size" in message
                            for _, (status, message), _ in rejected)
    slowest_rejection = max(t for *_, t in rejected)
    print(f"\n[{protocol}] full queue: {len(answered)} answered, {len(rejected)} rejected; "
          f"slowest rejection {slowest_rejection * 1000:.0f} ms (a batch takes {TINY.sleep_ms} ms)")
    assert slowest_rejection < TINY.sleep_ms / 1000, "a full queue must reject at once, not after waiting"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_request_waiting_past_its_queue_timeout_is_rejected(probe_server, protocol):
    """Behind a 400 ms batch, a request with a 50 ms queue timeout is rejected (not served stale),
    while one with a 5 s timeout behind the same batch is served."""

    async def main():
        async with AsyncTritonModelClient(probe_server.url(protocol), protocol) as client:
            blocker = asyncio.create_task(probe_call(client, TINY.name, 2.0, priority=2))
            await asyncio.sleep(0.2)  # the blocker is executing now (checked below)
            timed, patient = await asyncio.gather(
                probe_call(client, TINY.name, 2.1, priority=2, timeout_us=50_000),
                probe_call(client, TINY.name, 2.2, priority=2, timeout_us=5_000_000),
            )
            return await blocker, timed, patient

    # The precondition fails only when Triton's lost wake-up (docs/triton-batcher-stall.md) kept the
    # blocker queued past 200 ms; the scenario is then run again (at most 3 times).
    for _attempt in range(3):
        blocker, timed, patient = asyncio.run(main())
        assert blocker.error is None and patient.error is None
        if blocker.start_ns < timed.sent_ns:
            break
    assert blocker.start_ns < timed.sent_ns, "precondition: the blocker was executing when the timed request was sent"
    assert isinstance(timed.error, QueueTimeoutError), timed.error
    assert "Request timeout expired" in str(timed.error)
    assert ("HTTP 503" if protocol == "http" else "gRPC UNAVAILABLE") in str(timed.error)
    # Rejected once Triton looks at the queue again: when the batch ends, or on its 500 ms check.
    print(f"\n[{protocol}] 50 ms queue timeout rejected after {timed.latency_s * 1000:.0f} ms; "
          f"5 s timeout served after {patient.latency_s * 1000:.0f} ms")
    assert timed.latency_s >= 0.05 and timed.done_ns < patient.done_ns  # rejected, not served late
    assert timed.latency_s < 5.0  # and never left hanging


# ---------------------------------------------------------------------------- priorities and starvation
#: A gap between consecutive batch starts this long (a probe batch takes ~40 ms) is the batcher idle
#: with work queued: Triton 2.51's ~500 ms lost wake-up (docs/triton-batcher-stall.md).
STALL_GAP_S = 0.3


def stall_s(answer: ProbeAnswer, batch_starts_ns: list[int], execution_s: float) -> float:
    """Seconds of `answer`'s wait that the batcher spent stalled: for each gap between the send, the
    batch starts in between and its own batch's start that is >= STALL_GAP_S, the part beyond one
    batch's execution time."""
    points = [answer.sent_ns] + sorted(s for s in batch_starts_ns if answer.sent_ns <= s <= answer.start_ns)
    gaps = [(b - a) / 1e9 for a, b in zip(points, points[1:])]
    return sum(gap - execution_s for gap in gaps if gap >= STALL_GAP_S)


def test_under_realtime_saturation_realtime_goes_first_and_batch_stays_within_its_bound(probe_server):
    """10 realtime loops keep the realtime queue (4) full; then 16 batch requests arrive at once.

    Checks: no batch has more than 4 realtime items (the cap the guarantee rests on); realtime
    is answered faster than batch; every batch request is answered, in one of the first
    `bound.batches` batches formed after it was sent, and within the bound's time."""
    spec = PRIORITY.serving_spec()
    bound = lowest_priority_progress_bound(spec, PRIORITY.name)  # worst case: a full batch queue ahead
    assert (bound.reserved_items, bound.batches) == (4, 5)

    async def main():
        async with AsyncTritonModelClient(probe_server.grpc_url, "grpc") as client:
            await probe_call(client, PRIORITY.name, 2.99, priority=2)  # connection and model warm
            realtime: list[ProbeAnswer] = []
            stop = asyncio.Event()

            async def realtime_loop(k: int) -> None:
                for i in range(400):  # bounded; normally stopped much earlier
                    if stop.is_set():
                        return
                    answer = await probe_call(client, PRIORITY.name, 1 + (k * 50 + i % 50) / 1000, priority=1)
                    realtime.append(answer)
                    if answer.error is not None:
                        await asyncio.sleep(0.01)

            loops = [asyncio.create_task(realtime_loop(k)) for k in range(10)]
            await asyncio.sleep(0.5)
            burst_ns = time.monotonic_ns()
            batch = await asyncio.gather(*(probe_call(client, PRIORITY.name, 2 + j / 100, priority=2) for j in range(16)))
            await asyncio.sleep(0.1)
            stop.set()
            await asyncio.gather(*loops)
            return realtime, batch, burst_ns

    # The scenario needs the 10 client loops to keep the realtime queue full; on a busy 2-core host
    # the load generator (not the server) sometimes misses that, so it is re-run once, and every
    # run's accounting and queue-cap checks must hold.
    for attempt in (1, 2):
        realtime, batch, burst_ns = asyncio.run(main())

        # Accounting: every batch request answered; every realtime one answered or rejected as overload.
        assert all(a.error is None for a in batch), [str(a.error) for a in batch if a.error]
        assert all(a.error is None or (isinstance(a.error, OverloadedError) and not isinstance(a.error, QueueTimeoutError))
                   for a in realtime), {type(a.error).__name__ for a in realtime if a.error}

        executions = {a.execution: a for a in realtime + batch if a.error is None}
        in_burst = sorted(e for e, a in executions.items() if a.start_ns >= burst_ns and e <= max(b.execution for b in batch))
        assert all(executions[e].tagged_items <= PRIORITY.realtime_queue for e in executions), \
            "a batch held more realtime items than the realtime queue can"
        with_batch_work = [e for e in in_burst if executions[e].batch_items > executions[e].tagged_items]
        saturated = [e for e in with_batch_work if executions[e].tagged_items == PRIORITY.realtime_queue]
        if len(saturated) >= len(with_batch_work) / 2:
            break
        print(f"\n[saturation] run {attempt}: realtime filled its queue in {len(saturated)} of the {len(with_batch_work)} "
              f"batches holding batch work (precondition: half); " + ("re-measuring once" if attempt == 1 else "giving up"))
    assert len(saturated) >= len(with_batch_work) / 2, "precondition: realtime kept its queue full (in two runs)"

    starts = sorted((a.execution, a.start_ns) for a in executions.values())

    def batches_formed_until_served(answer: ProbeAnswer) -> int:
        first_after_send = min(e for e, s in starts if s >= answer.sent_ns)
        return answer.execution - first_after_send + 1

    waited = [batches_formed_until_served(a) for a in batch]
    periods = [(s2 - s1) / 1e9 for (e1, s1), (e2, s2) in zip(starts, starts[1:]) if e2 == e1 + 1 and e1 in in_burst]
    execution_s = max(p for p in periods if p < STALL_GAP_S)
    latest_s = bound.latest_completion_s(execution_s, PRIORITY.max_queue_delay_us / 1e6)
    # Triton 2.51's lost wake-up (docs/triton-batcher-stall.md) can idle the batcher ~500 ms with a
    # full queue and one instance; such gaps are Triton's defect, not the schedule, so the time
    # bound is checked on the latency without them (the batch-count bound holds either way).
    stalls = [stall_s(a, [s for _, s in starts], execution_s) for a in batch]
    rt_burst = [a.latency_s for a in realtime if a.error is None and a.sent_ns >= burst_ns]
    batch_latency = [a.latency_s for a in batch]
    latency_without_stalls = [a.latency_s - stall for a, stall in zip(batch, stalls)]
    rejected = sum(a.error is not None for a in realtime)
    print(f"\n[saturation] realtime: {len(realtime) - rejected} answered, {rejected} rejected (503); "
          f"batch: {len(batch)} answered. Per batch during the burst: realtime items "
          f"{[executions[e].tagged_items for e in in_burst]}, all items {[executions[e].batch_items for e in in_burst]}")
    print(f"[saturation] realtime latency p50 {statistics.median(rt_burst) * 1000:.0f} ms max {max(rt_burst) * 1000:.0f} ms; "
          f"batch latency p50 {statistics.median(batch_latency) * 1000:.0f} ms max {max(batch_latency) * 1000:.0f} ms "
          f"(bound {latest_s * 1000:.0f} ms at {execution_s * 1000:.0f} ms per batch)")
    print(f"[saturation] batches formed until each batch request was served: max {max(waited)} "
          f"(bound {bound.batches}); distribution {sorted(waited)}")
    if max(stalls) > 0:
        print(f"[saturation] Triton lost-wakeup stall in a batch request's wait: up to {max(stalls) * 1000:.0f} ms "
              f"(excluded from the time check); batch latency without it max {max(latency_without_stalls) * 1000:.0f} ms")
    assert max(waited) <= bound.batches
    assert max(latency_without_stalls) <= latest_s
    assert statistics.median(rt_burst) < statistics.median(batch_latency)


# ---------------------------------------------------------------------------- overload stages
def test_stage1_batch_traffic_is_throttled_first_while_realtime_is_served(probe_server):
    """Stage 1: batch work meets a full batch-level queue (503) and backs off (jittered retries);
    realtime requests arriving meanwhile are admitted at once and answered first."""
    retry = RetryPolicy(max_attempts=40, base_delay_s=0.05, max_delay_s=0.4, deadline_s=15)

    async def main():
        async with AsyncResilientClient("grpc", url=probe_server.grpc_url, retry=retry, rng=random.Random(0)) as client:
            batch_jobs = [InferenceJob(STAGE_MAIN.name, {"tag": np.array([[2 + i / 100]], np.float32)}, priority=2)
                          for i in range(12)]
            realtime_jobs = [InferenceJob(STAGE_MAIN.name, {"tag": np.array([[1 + i / 100]], np.float32)}, priority=1)
                             for i in range(2)]

            async def realtime_later():
                await asyncio.sleep(0.05)  # the batch burst has filled the batch-level queue by now
                return await infer_concurrently(client, realtime_jobs, concurrency=2)

            return await asyncio.gather(infer_concurrently(client, batch_jobs, concurrency=12), realtime_later())

    batch, realtime = asyncio.run(main())
    assert all(r.ok for r in batch + realtime), [str(r.error) for r in batch + realtime if not r.ok]
    for r in batch + realtime:
        np.testing.assert_array_equal(r.outcome.outputs["tag_out"], r.job.inputs["tag"])
    batch_calls = sum(r.outcome.calls for r in batch)
    print(f"\n[stage 1] 12 batch requests took {batch_calls} calls (503 + backoff), max latency "
          f"{max(r.latency_s for r in batch) * 1000:.0f} ms; 2 realtime took {[r.outcome.calls for r in realtime]} "
          f"calls, max latency {max(r.latency_s for r in realtime) * 1000:.0f} ms")
    assert batch_calls > len(batch), "batch work was throttled (rejected and retried)"
    assert all(r.outcome.calls == 1 for r in realtime), "realtime was admitted at once"
    # Finish times, not latencies: a Triton lost-wakeup stall (docs/triton-batcher-stall.md) delays
    # whatever is queued at that moment, realtime and batch alike, but cannot reorder them.
    assert max(r.finished_s for r in realtime) < max(r.finished_s for r in batch)


def test_stage2_realtime_overload_degrades_to_the_smaller_model(probe_server):
    """Stage 2: 16 realtime requests at once; the main model's realtime queue (2) overflows and the
    client sends the excess to the fallback at once. Every request is answered."""
    fallback = FallbackPolicy.of({STAGE_MAIN.name: STAGE_SMALL.name})
    retry = RetryPolicy(max_attempts=20, base_delay_s=0.02, max_delay_s=0.2, deadline_s=10)

    async def main():
        async with AsyncResilientClient("http", url=probe_server.http_url, retry=retry, fallback=fallback,
                                        rng=random.Random(1)) as client:
            jobs = [InferenceJob(STAGE_MAIN.name, {"tag": np.array([[1 + i / 100]], np.float32)}, priority=1)
                    for i in range(16)]
            return await infer_concurrently(client, jobs, concurrency=16)

    results = asyncio.run(main())
    assert all(r.ok for r in results), [str(r.error) for r in results if not r.ok]
    by_model = [r.outcome.answered_by[0] for r in results]
    for r in results:
        np.testing.assert_array_equal(r.outcome.outputs["tag_out"], r.job.inputs["tag"])
        assert r.outcome.degraded == (r.outcome.answered_by[0] == STAGE_SMALL.name)
    print(f"\n[stage 2] 16 realtime: {by_model.count(STAGE_MAIN.name)} by {STAGE_MAIN.name}, "
          f"{by_model.count(STAGE_SMALL.name)} degraded to {STAGE_SMALL.name}; calls {sum(r.outcome.calls for r in results)}")
    assert by_model.count(STAGE_MAIN.name) >= 1 and by_model.count(STAGE_SMALL.name) >= 1


def test_stage3_when_the_fallback_is_full_too_new_requests_are_rejected_with_advice(probe_server):
    """Stage 3: main and fallback both full: the excess gets 503/UNAVAILABLE, which the client
    raises as OverloadedError with retry advice (here without retries, to see the rejection)."""
    fallback = FallbackPolicy.of({STAGE_MAIN.name: TINY.name})

    async def main():
        async with AsyncResilientClient("grpc", url=probe_server.grpc_url, retry=NO_RETRY, fallback=fallback) as client:
            jobs = [InferenceJob(STAGE_MAIN.name, {"tag": np.array([[1 + i / 100]], np.float32)}, priority=1)
                    for i in range(12)]
            return await infer_concurrently(client, jobs, concurrency=12)

    results = asyncio.run(main())
    answered = [r for r in results if r.ok]
    rejected = [r for r in results if not r.ok]
    assert len(answered) + len(rejected) == 12
    assert {r.outcome.answered_by[0] for r in answered} <= {STAGE_MAIN.name, TINY.name}
    assert rejected and all(isinstance(r.error, OverloadedError) for r in rejected)
    message = str(rejected[0].error)
    print(f"\n[stage 3] 12 realtime: {len(answered)} answered, {len(rejected)} rejected; caller sees: {message}")
    assert "gRPC UNAVAILABLE" in message and "Exceeds maximum queue size" in message and "retry" in message.lower()
    assert f"model {STAGE_MAIN.name!r}" in message and f"Fallback {TINY.name!r}" in message
    assert max(r.latency_s for r in rejected) < STAGE_MAIN.sleep_ms / 1000 + TINY.sleep_ms / 1000
