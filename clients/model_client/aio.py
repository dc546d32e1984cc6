"""asyncio clients: many requests in flight from one thread, over HTTP or gRPC.

`AsyncTritonModelClient` is the asyncio twin of `TritonModelClient` (tritonclient.http.aio on
aiohttp, tritonclient.grpc.aio on grpc.aio), with the same error mapping. `AsyncResilientClient`
adds retries with backoff, fallback and size limits exactly like `ResilientClient` (the same pure
`plan_call` and `AttemptPlanner` decide; only the sleeps and calls are awaited). `infer_concurrently` runs a list of jobs with bounded concurrency
and returns one result per job, in order: an outcome or the error, never a silent drop.

    async with AsyncResilientClient("grpc", retry=RetryPolicy(deadline_s=2)) as client:
        results = await infer_concurrently(client, jobs, concurrency=32)
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from model_client.client import (
    ModelInterface,
    Protocol,
    check_url,
    classify_triton_error,
    deadline_error,
    grpc_channel_args,
    interface_from_metadata,
    prepare_infer_call,
)
from model_client.errors import ClientError
from model_client.policies import SleepBeforeRetry
from model_client.resilient import (
    CallPlan,
    InferenceOutcome,
    ResilientClientBase,
    merge_parts,
    plan_call,
    slice_inputs,
)


class AsyncTritonModelClient:
    """One connection (pool) to one server; safe for many concurrent coroutines of one loop."""

    def __init__(self, url: str, protocol: Protocol | str = Protocol.HTTP, network_timeout_s: float = 30.0):
        self.url = check_url(url)
        self.protocol = Protocol(protocol)
        #: over gRPC (no socket timeout), the deadline of a call that names none
        self._grpc_default_timeout_s = network_timeout_s if self.protocol is Protocol.GRPC else None
        if self.protocol is Protocol.HTTP:
            import tritonclient.http.aio as module

            try:
                self._client = module.InferenceServerClient(url, conn_timeout=network_timeout_s)
            except RuntimeError as exc:  # aiohttp's session needs the loop it will run on
                if "no running event loop" not in str(exc):
                    raise
                raise ClientError(f"{type(self).__name__}({url!r}, 'http') was created outside a running event loop: "
                                  f"create it inside a coroutine (`async with {type(self).__name__}(...) as client:`), "
                                  f"on the loop that will use it.") from None
        else:
            import tritonclient.grpc.aio as module

            self._client = module.InferenceServerClient(url, channel_args=grpc_channel_args())
        self._module = module
        self._interfaces: dict[str, ModelInterface] = {}

    async def close(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> "AsyncTritonModelClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _classified(self, model: str, awaitable):
        """Await `awaitable`, its errors classified; a timeout of the transport itself (aiohttp's
        `network_timeout_s`) is one of them, told apart from the caller's deadline in `_call`."""
        try:
            return await awaitable
        except Exception as exc:  # tritonclient raises its own and transport errors
            raise classify_triton_error(exc, self.url, model) from None

    async def _call(self, model: str, client_timeout_s: float | None, awaitable):
        """Await `awaitable`, its errors classified; within `client_timeout_s` when given (over gRPC the
        call also carries it as its own deadline)."""
        if client_timeout_s is None:
            return await self._classified(model, awaitable)
        try:
            return await asyncio.wait_for(self._classified(model, awaitable), max(client_timeout_s, 0.001))
        except asyncio.TimeoutError:  # only wait_for's own: the awaitable's timeouts are classified above
            raise deadline_error(self.url, model, client_timeout_s) from None

    async def interface(self, model: str, client_timeout_s: float | None = None) -> ModelInterface:
        """The model's inputs and outputs (fetched once; within `client_timeout_s` when given)."""
        if model not in self._interfaces:
            client_timeout_s = self._grpc_default_timeout_s if client_timeout_s is None else client_timeout_s
            if self.protocol is Protocol.HTTP:
                fetch = self._client.get_model_metadata(model)
            else:
                fetch = self._client.get_model_metadata(model, as_json=True, client_timeout=client_timeout_s)
            meta = await self._call(model, client_timeout_s, fetch)
            self._interfaces[model] = interface_from_metadata(model, meta)
        return self._interfaces[model]

    async def infer(self, model: str, inputs: Mapping[str, np.ndarray], priority: int = 0, timeout_us: int | None = None,
                    output_names: Sequence[str] | None = None, client_timeout_s: float | None = None) -> dict[str, np.ndarray]:
        """Like `TritonModelClient.infer`: `client_timeout_s` bounds the whole call, metadata included."""
        client_timeout_s = self._grpc_default_timeout_s if client_timeout_s is None else client_timeout_s
        deadline = None if client_timeout_s is None else time.monotonic() + client_timeout_s
        interface = await self.interface(model, client_timeout_s)
        left = None if deadline is None else deadline - time.monotonic()
        call = prepare_infer_call(self._module, self.protocol, interface, inputs, priority, timeout_us, output_names, left)
        result = await self._call(model, left, self._client.infer(model, call.inputs, outputs=call.outputs, **call.kwargs))
        return {n: result.as_numpy(n) for n in call.output_names}


#: Requests of one split call in flight at once (`AsyncResilientClient.parts_in_flight`): 4 x 8 items
#: at the batch level (serving.toml's max_request_batch_size). Why a bound: all at once, one call of
#: 2,048+ items filled the model's whole batch queue (256 requests) by itself and then failed on the
#: rejections it caused; the blocking client sends its parts one after another.
DEFAULT_PARTS_IN_FLIGHT = 4


class AsyncResilientClient(ResilientClientBase):
    """`ResilientClient` for asyncio: retries sleep with `asyncio.sleep`, other calls go on; the
    requests a large call is split into go at most `parts_in_flight` at a time."""

    default_client_factory = AsyncTritonModelClient
    default_sleep = staticmethod(asyncio.sleep)

    def __init__(self, *args, parts_in_flight: int = DEFAULT_PARTS_IN_FLIGHT, **kwargs):
        super().__init__(*args, **kwargs)
        if isinstance(parts_in_flight, bool) or not isinstance(parts_in_flight, int) or parts_in_flight < 1:
            raise ClientError(f"parts_in_flight = {parts_in_flight!r}: allowed an integer >= 1.")
        self.parts_in_flight = parts_in_flight

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    async def __aenter__(self) -> "AsyncResilientClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def infer(self, model: str, inputs: Mapping[str, np.ndarray], priority: int = 0,
                    timeout_us: int | None = None, started_s: float | None = None) -> InferenceOutcome:
        """`ResilientClient.infer`, awaited (`started_s` likewise: an earlier step's start)."""
        start = self._clock() if started_s is None else started_s
        plan = plan_call(model, inputs, priority, self.limits, self.fallback)
        # The parts of one call go concurrently (each is its own request in the server's queue), at most
        # `parts_in_flight` at a time, all within the call's one deadline; when one fails, the others
        # are cancelled, not left retrying.
        gate = asyncio.Semaphore(self.parts_in_flight)

        async def part(lo: int, hi: int):
            async with gate:
                return await self._request(plan, slice_inputs(inputs, lo, hi), priority, timeout_us, start)

        tasks = [asyncio.ensure_future(part(lo, hi)) for lo, hi in plan.ranges]
        try:
            parts = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return InferenceOutcome(merge_parts([p[0] for p in parts]), model, tuple(p[1] for p in parts),
                                sum(p[2] for p in parts), self._clock() - start)

    async def interface(self, model: str, priority: int = 0) -> ModelInterface:
        """`ResilientClient.interface`, awaited: the primary's metadata, or the fallback's while the
        primary is unreachable or overloaded and `priority` allows the fallback."""
        interface, _, _ = await self._with_retries(self._interface_plan(model, priority), None, self._clock(), lambda client, step: client.interface(
            step.model, client_timeout_s=step.client_timeout_s))
        return interface

    async def _request(self, plan: CallPlan, inputs: dict[str, np.ndarray], priority: int,
                       timeout_us: int | None, call_start_s: float) -> tuple[dict[str, np.ndarray], str, int]:
        """`ResilientClient._request`, awaited: the same `AttemptPlanner` decides every step."""
        return await self._with_retries(plan, timeout_us, call_start_s, lambda client, step: client.infer(
            step.model, inputs, priority=priority, timeout_us=step.timeout_us, client_timeout_s=step.client_timeout_s))

    async def _with_retries(self, plan: CallPlan, timeout_us: int | None, call_start_s: float, send):
        """`ResilientClient._with_retries`, awaited: `send(client, step)` returns an awaitable."""
        self._connect_primary(plan)
        planner = self._attempt_planner(plan, timeout_us, call_start_s)
        while True:
            step = planner.next_step(self._clock())  # raises the final error when it gives up
            if isinstance(step, SleepBeforeRetry):
                await self._sleep(step.seconds)
                continue
            try:
                answer = await send(self.client_for(step.model), step)
            except ClientError as exc:  # 503/UNAVAILABLE or unreachable: the fallback may still answer
                self._record_failure(planner, step, exc)
                continue
            return answer, step.model, planner.calls


@dataclass(frozen=True)
class InferenceJob:
    model: str
    inputs: Mapping[str, np.ndarray] = field(repr=False)
    priority: int = 0
    timeout_us: int | None = None


@dataclass(frozen=True)
class InferenceResult:
    """Exactly one of `outcome` and `error` is set."""

    job: InferenceJob
    outcome: InferenceOutcome | None = None
    error: ClientError | None = None
    #: When the job was sent and finished (time.monotonic), for latency accounting.
    started_s: float = 0.0
    finished_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome is not None

    @property
    def latency_s(self) -> float:
        return self.finished_s - self.started_s


async def infer_concurrently(client: AsyncResilientClient | AsyncTritonModelClient, jobs: Sequence[InferenceJob],
                             concurrency: int = 16) -> list[InferenceResult]:
    """Run `jobs` with at most `concurrency` in flight; one `InferenceResult` per job, in order: a job
    that fails (any exception, not only the documented ones) gets its error, and the others go on.

    A plain `AsyncTritonModelClient` makes one attempt per job (its outcome has calls == 1)."""
    if concurrency < 1:
        raise ClientError(f"concurrency = {concurrency}: allowed >= 1.")
    gate = asyncio.Semaphore(concurrency)

    async def run(job: InferenceJob) -> InferenceResult:
        async with gate:
            started = time.monotonic()
            try:
                if isinstance(client, AsyncResilientClient):
                    outcome = await client.infer(job.model, job.inputs, job.priority, job.timeout_us)
                else:
                    outputs = await client.infer(job.model, job.inputs, job.priority, job.timeout_us)
                    outcome = InferenceOutcome(outputs, job.model, (job.model,), 1, time.monotonic() - started)
                return InferenceResult(job, outcome=outcome, started_s=started, finished_s=time.monotonic())
            except ClientError as exc:
                return InferenceResult(job, error=exc, started_s=started, finished_s=time.monotonic())
            except Exception as exc:  # noqa: BLE001 - one job's unexpected failure must not lose the others' results
                error = ClientError(f"job for {job.model!r} failed in the client: {type(exc).__name__}: {exc}")
                error.__cause__ = exc
                return InferenceResult(job, error=error, started_s=started, finished_s=time.monotonic())

    return list(await asyncio.gather(*(run(job) for job in jobs)))
