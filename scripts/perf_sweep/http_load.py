"""ONE load generator for every target of the peer comparison: aiohttp, JSON over HTTP, one item
per request, a closed loop at a concurrency or open-loop Poisson arrivals.

perf_analyzer speaks only to Triton; a peer comparison needs the same client for Triton, a
FastAPI server and infinity-emb alike, so this is it. Each level gets a fresh `ClientSession`
(keep-alive connections, so no level inherits another's sockets), sends for the warm-up, then for
the measuring window, and awaits every request it sent: each ends as an answer (checked by the
workload's `AnswerCheck` after the clock stopped), an explicit HTTP error, a connection error or a
timeout (perf_sweep.peers.stats counts them). Item i of a level is `bodies[i % n]`, from item 0
in every level, so every target sees the same items in the same order.

The client shares the machine with the target (as a user's client would); its CPU time per level
is recorded so a report can tell when the client, not the target, was the limit.
"""
from __future__ import annotations

import asyncio
import itertools
import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from perf_sweep.errors import SweepRunError
from perf_sweep.loadgen import poisson_arrivals
from perf_sweep.peers.codec import Workload
from perf_sweep.peers.plan import LoadLevel, LoadMode
from perf_sweep.peers.stats import Outcome, RequestRecord

JSON_HEADERS = {"Content-Type": "application/json"}
#: Open connections per level at most (Poisson); a closed loop opens one per client.
MAX_CONNECTIONS = 256


@dataclass(frozen=True)
class LevelRun:
    records: tuple[RequestRecord, ...]
    window_start_s: float
    client_cpu: float  # CPU seconds of this process / wall seconds of the level


async def send_one(session, workload: Workload, index: int, scheduled_s: float, t0: float,
                   timeout_s: float) -> RequestRecord:
    """POST item `index`; the latency clock stops when the whole answer has arrived."""
    import aiohttp

    body = workload.bodies[index % len(workload.bodies)]
    sent = time.perf_counter() - t0
    try:
        async with session.post(workload.url, data=body, headers=JSON_HEADERS,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            payload = await response.read()
            status = response.status
        done = time.perf_counter() - t0
    except asyncio.TimeoutError:
        return RequestRecord(index, scheduled_s, sent, sent + timeout_s, Outcome.TIMEOUT, f"no answer within {timeout_s:g} s")
    except aiohttp.ClientError as exc:
        done = time.perf_counter() - t0
        return RequestRecord(index, scheduled_s, sent, done, Outcome.CONNECTION_ERROR, f"{type(exc).__name__}: {exc}")
    if status != 200:
        text = payload[:200].decode("utf-8", "replace")
        return RequestRecord(index, scheduled_s, sent, done, Outcome.HTTP_ERROR, f"HTTP {status}: {text}")
    try:
        error, score = workload.check(index, payload)
    except Exception as exc:  # noqa: BLE001 - a checker that breaks on an answer must not lose the level's records
        error, score = f"the answer could not be checked ({type(exc).__name__}: {exc})", math.nan
    return RequestRecord(index, scheduled_s, sent, done, Outcome.OK if error is None else Outcome.WRONG_ANSWER, error, score)


async def closed_loop(workload: Workload, concurrency: int, warmup_s: float, window_s: float,
                      timeout_s: float) -> list[RequestRecord]:
    """`concurrency` clients, each sending its next request as soon as the previous one ended,
    until warm-up + window have passed; nothing is sent after that."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=max(concurrency, 1), force_close=False)
    items = itertools.count()
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.perf_counter()
        end = warmup_s + window_s

        async def client() -> list[RequestRecord]:
            mine = []
            while (now := time.perf_counter() - t0) < end:
                mine.append(await send_one(session, workload, next(items), now, t0, timeout_s))
            return mine

        per_client = await asyncio.gather(*(client() for _ in range(concurrency)))
    return [r for records in per_client for r in records]


async def open_loop(workload: Workload, arrivals_s: Sequence[float], timeout_s: float) -> list[RequestRecord]:
    """One request per planned arrival, sent at its time whatever is still in flight."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.perf_counter()
        tasks = []
        for index, at in enumerate(arrivals_s):
            delay = at - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send_one(session, workload, index, float(at), t0, timeout_s)))
        return list(await asyncio.gather(*tasks))


def run_level(workload: Workload, level: LoadLevel, timeout_s: float, seed: int = 0) -> LevelRun:
    """One level against a running target; blocks until every request has ended."""
    cpu, wall = time.process_time(), time.perf_counter()
    if level.mode is LoadMode.CLOSED:
        records = asyncio.run(closed_loop(workload, int(level.value), level.warmup_s, level.window_s, timeout_s))
    else:
        arrivals = poisson_arrivals(level.value, level.warmup_s + level.window_s, seed)
        records = asyncio.run(open_loop(workload, np.asarray(arrivals), timeout_s))
    wall = time.perf_counter() - wall
    if not records:
        raise SweepRunError(f"{workload.target} {workload.model.value} {level.label}: no request was sent "
                            f"(warm-up {level.warmup_s} s, window {level.window_s} s).")
    return LevelRun(tuple(records), level.warmup_s, (time.process_time() - cpu) / wall if wall > 0 else math.nan)
