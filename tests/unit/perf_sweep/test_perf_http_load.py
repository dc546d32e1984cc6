"""The load generator against a tiny in-process aiohttp server on a free loopback port: every request
ends as exactly one outcome, closed loops stop at the window, Poisson arrivals are sent on time."""
import asyncio
import json
import threading

import numpy as np
import pytest

from perf_sweep.http_load import run_level
from perf_sweep.peers.codec import Api, AnswerCheck, Workload
from perf_sweep.peers.plan import LoadLevel, LoadMode, ModelKind
from perf_sweep.peers.stats import Outcome, summarize_level


def answer(argmax):
    data = [0.0] * 10
    data[argmax] = 1.0
    return {"outputs": [{"name": "probabilities", "shape": [1, 10], "datatype": "FP32", "data": data}]}


@pytest.fixture(scope="module")
def server():
    """/ok answers item i's digit (i % 10), /wrong always 0, /busy 503, /slow after 1 s."""
    from aiohttp import web

    from contracts.processes import free_loopback_ports

    async def ok(request):
        body = await request.json()
        return web.json_response(answer(int(body["inputs"][0]["data"][0]) % 10))

    async def wrong(request):
        return web.json_response(answer(0))

    async def busy(request):
        return web.json_response({"error": "Exceeds maximum queue size"}, status=503)

    async def slow(request):
        await asyncio.sleep(1.0)
        return web.json_response(answer(0))

    port = free_loopback_ports(1)[0]
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.add_routes([web.post("/ok", ok), web.post("/wrong", wrong), web.post("/busy", busy), web.post("/slow", slow)])
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    # close the site and its open connections (the /slow handlers a timeout test left) before the
    # loop stops, so no handler task is left pending at exit ("Task was destroyed but it is pending!")
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def workload(url, items=20):
    bodies = tuple(json.dumps({"inputs": [{"name": "image", "data": [i]}]}).encode() for i in range(items))
    check = AnswerCheck(ModelKind.DIGITS, Api.KSERVE_V2, "probabilities", 10, expected_argmax=tuple(i % 10 for i in range(items)))
    return Workload("fake", ModelKind.DIGITS, url, bodies, check)


def test_a_closed_loop_keeps_its_clients_busy_and_stops_sending_at_the_end_of_the_window(server):
    level = LoadLevel(LoadMode.CLOSED, 3, warmup_s=0.2, window_s=0.4)
    run = run_level(workload(server + "/ok"), level, timeout_s=2)
    assert run.window_start_s == 0.2
    assert all(r.outcome is Outcome.OK and 0 <= r.score for r in run.records)
    assert max(r.scheduled_s for r in run.records) < 0.6
    assert sorted(r.index for r in run.records) == list(range(len(run.records)))  # items in order, none twice
    summary = summarize_level(run.records, level, "fake", "digit_classifier", run.window_start_s, run.client_cpu)
    assert summary.ok == summary.measured > 0 and summary.throughput > 0 and 0 < summary.client_cpu


def test_wrong_answers_and_refusals_are_errors_not_throughput(server):
    level = LoadLevel(LoadMode.CLOSED, 2, warmup_s=0.0, window_s=0.2)
    wrong = run_level(workload(server + "/wrong"), level, timeout_s=2).records
    assert {r.outcome for r in wrong if r.index % 10} == {Outcome.WRONG_ANSWER}
    busy = run_level(workload(server + "/busy"), level, timeout_s=2).records
    assert {r.outcome for r in busy} == {Outcome.HTTP_ERROR} and "HTTP 503" in busy[0].detail


def test_an_answer_later_than_the_timeout_is_a_timeout_and_a_closed_port_a_connection_error(server):
    level = LoadLevel(LoadMode.CLOSED, 1, warmup_s=0.0, window_s=0.1)
    slow = run_level(workload(server + "/slow"), level, timeout_s=0.3).records
    assert slow[0].outcome is Outcome.TIMEOUT and slow[0].done_s - slow[0].sent_s == pytest.approx(0.3)
    from contracts.processes import free_loopback_ports

    refused = run_level(workload(f"http://127.0.0.1:{free_loopback_ports(1)[0]}/x"), level, timeout_s=1).records
    assert refused[0].outcome is Outcome.CONNECTION_ERROR


def test_poisson_arrivals_are_sent_on_time_whatever_is_in_flight(server):
    level = LoadLevel(LoadMode.POISSON, 50, warmup_s=0.1, window_s=0.5)
    run = run_level(workload(server + "/ok"), level, timeout_s=2, seed=3)
    scheduled = np.array([r.scheduled_s for r in run.records])
    assert 10 <= len(scheduled) <= 60 and np.all(np.diff(scheduled) >= 0)
    lags = np.array([r.sent_s - r.scheduled_s for r in run.records])
    assert np.percentile(lags, 90) < 0.05
    assert run_level(workload(server + "/ok"), level, timeout_s=2, seed=3).records[0].scheduled_s == scheduled[0]
