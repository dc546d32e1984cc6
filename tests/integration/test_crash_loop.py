"""A partition that keeps dying under the real supervisor: it never becomes a silent, permanent
outage. After the restart budget is spent it enters `crash_loop` (slow retries, not giving up),
`make status`, the supervisor's metrics endpoint and a real Prometheus (the
ServingPartitionCrashLooping alert firing) all say so, and once the crashes stop it comes back and
the crash loop ends by itself.

The crash is a real one: Triton 2.51 aborts (std::bad_alloc) on an HTTP JSON request declaring a
shape beyond any host's memory (docs/operations.md), with the request guard's per-input size limit
turned off for this server (SERVING_REQUEST_GUARD_MAX_INPUT_BYTES=0), which otherwise refuses it. Budget and intervals are shortened for the test
(--max-restarts 2, --crash-loop-backoff 10 s, --stable-after 4 s); the defaults are 5 / 300 s / 60 s."""
from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request

import numpy as np
import pytest

from conftest import poll_until, scrape_text, series_total
from contracts.supervisor_state import PartitionStatus
from supervision import partition_pid, serving_cli, supervised_server, supervisor_state

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="prometheus not installed (Debian package `prometheus`; scripts/setup_system_packages.sh)"),
]
MODEL = "digit_classifier"
POLICY = ["--max-restarts=2", "--crash-loop-backoff=10", "--stable-after=4", "--initial-backoff=0.5"]
CRASH_BODY = json.dumps({"inputs": [{"name": "image", "shape": [1, 1, 99999999, 99999999], "datatype": "FP32",
                                     "data": [0.0] * 64}]}).encode()


def crash(server: dict) -> None:
    request = urllib.request.Request(f"http://{server['http']}/v2/models/{MODEL}/infer", data=CRASH_BODY, method="POST",
                                     headers={"Content-Type": "application/json"})
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(request, timeout=10)


def partition(server: dict) -> PartitionStatus:
    return supervisor_state(server).partitions["default"]


def supervisor_metric(server: dict, name: str, **labels: str) -> float | None:
    return series_total(scrape_text(server["supervisor_metrics"]), name, **labels)


def classify_ok(server: dict) -> bool:
    from model_client.client import TritonModelClient

    try:
        with TritonModelClient(server["http"], "http", network_timeout_s=5) as client:
            result = client.infer(MODEL, {"image": np.zeros((1, 1, 8, 8), np.float32)})["probabilities"]
        return result.shape == (1, 10)
    except Exception:  # noqa: BLE001 - down or restarting: not OK yet
        return False


def test_a_partition_that_keeps_dying_enters_a_loud_crash_loop_and_comes_back(tmp_path, monkeypatch):
    from operations.monitor import api_get, start_monitoring, stop_monitoring

    monkeypatch.setenv("SERVING_REQUEST_GUARD_MAX_INPUT_BYTES", "0")  # let the upstream crash through
    with supervised_server(tmp_path, [MODEL], supervise_args=POLICY) as server:
        prometheus = start_monitoring(server["manifest"], tmp_path / "prometheus", scrape_interval="1s", timeout=30)
        try:
            for attempt in range(3):
                assert poll_until(lambda: partition(server).state == "ready" and classify_ok(server), bool, 60), \
                    f"not ready before crash {attempt + 1}: {partition(server)}"
                old = partition_pid(server["manifest"])
                crash(server)
                poll_until(lambda: partition(server).state != "ready" or partition_pid(server["manifest"]) != old, bool, 10)
            looping = poll_until(lambda: partition(server), lambda p: p.state == "crash_loop", 10)
            assert looping.state == "crash_loop" and looping.crash_loop and looping.restarts == 2, looping
            assert 0 < looping.next_attempt_in_s <= 10
            status = serving_cli("status", *server["common"])
            assert status.returncode == 1 and "CRASH LOOP: restart budget of 2 spent; 2 restart(s)" in status.stdout, status.stdout
            assert supervisor_metric(server, "serving_partition_crash_loop", partition="default") == 1
            firing = poll_until(lambda: api_get(prometheus["url"], "/api/v1/query",
                                                query='ALERTS{alertname="ServingPartitionCrashLooping",alertstate="firing"}')["result"],
                                bool, 20)
            assert firing and firing[0]["metric"]["partition"] == "default", firing
            # the cause is gone (no more crash requests): the slow retry brings it back, and it stays
            assert poll_until(lambda: classify_ok(server), bool, 40), partition(server)
            recovered = poll_until(lambda: partition(server), lambda p: not p.crash_loop, 15)
            assert recovered.state == "ready" and not recovered.crash_loop and recovered.crash_loops == 1, recovered
            assert supervisor_metric(server, "serving_partition_crash_loop", partition="default") == 0
            print(f"\ncrash loop entered after 3 crashes (2 restarts); alert firing; back and stable; {recovered}")
        finally:
            stop_monitoring(tmp_path / "prometheus")
