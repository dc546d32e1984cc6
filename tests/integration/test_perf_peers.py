"""The peer comparison end to end on tiny windows: this project started by `serving serve` on free
ports (as a user starts it) and the minimal FastAPI peer from .venv/peers, the same inputs and the
same load generator, the in-process limit, the verdicts and the report; everything stopped after."""
import gzip
import json
import urllib.request

import pytest

from perf_sweep.peers.plan import ModelKind, SuiteTiming, TargetKind
from perf_sweep.peers.suite import PeerSuiteOptions, peers_missing, read_levels, run_peer_suite

pytestmark = [pytest.mark.server, pytest.mark.slow]

TINY = SuiteTiming(concurrencies=(1, 4), rate_fractions=(0.5,), warmup_s=0.3, window_s=1.0, request_timeout_s=10)


def test_the_suite_measures_this_project_and_the_minimal_peer_alike_and_stops_them(tmp_path):
    from conftest import PROJECT_ROOT

    # the full peers (make setup-peers), else the minimal peer's small environment (make test installs it)
    venv = next((v for v in (PeerSuiteOptions.peers_venv, PROJECT_ROOT / ".venv" / "peers-minimal")
                 if peers_missing(v, (TargetKind.MINIMAL,)) is None), None)
    if venv is None:
        pytest.skip(f"the peers are not installed: {peers_missing(PeerSuiteOptions.peers_venv, (TargetKind.MINIMAL,))}")
    lines: list[str] = []
    opts = PeerSuiteOptions(out_dir=tmp_path / "peers", targets=(TargetKind.MINIMAL,), timing=TINY, text_count=16,
                            limit_seconds_per_batch=0.1, peers_venv=venv)
    results = run_peer_suite(opts, progress=lines.append)
    log = "\n".join(lines)

    assert {name: entry.get("measured") for name, entry in results["targets"].items()} == {
        "minimal_fastapi": True, "this_project": True}, log
    levels = results["levels"]
    pairs = {(s["target"], s["model"]) for s in levels}
    assert pairs == {(t, m.value) for t in ("minimal_fastapi", "this_project") for m in ModelKind}, log
    assert len(levels) == 4 * 3  # c=1, c=4 and one Poisson rate, the same rate for both targets
    assert len({s["load"] for s in levels if s["mode"] == "poisson" and s["model"] == "digit_classifier"}) == 1
    for s in levels:
        assert s["measured"] == sum(s["outcomes"].values()) and s["sent"] == s["warmup_requests"] + s["measured"]
        assert s["ok"] == s["measured"] > 0, (s["target"], s["model"], s["label"], s["first_error"])
        assert s["min_score"] >= (1.0 if s["model"] == "digit_classifier" else 0.9)

    # this project's levels carry what its server saw: Triton's counters and the backend's split
    for s in (s for s in levels if s["target"] == "this_project"):
        inside = s["server"]
        # the server counted every request the client sent, warm-up included, as a success: none lost
        assert inside["requests"] == s["sent"] and inside["executions"] > 0, (s["label"], inside)
        assert inside["compute_infer_ms_per_request"] > 0 and inside["framework_ms_per_execution"] > 0, inside
        if s["label"] == "c=1":  # one request in flight: every execution holds exactly one
            assert inside["requests_per_execution"] == 1.0, inside
    assert all(s.get("server") is None for s in levels if s["target"] == "minimal_fastapi")

    assert set(results["limits"]) == {"digit_classifier", "text_embedder"}
    assert len(results["headlines"]) == 2 * (2 + 2 + 1 + 1) and results["summary"].startswith("issue 10 targets:")
    folder = opts.folder
    report = (folder / "report.md").read_text()
    assert "**Machine**:" in report and "| this_project |" in report and "python -m serving serve" in report
    assert report.count("Inside this project's server") == 2  # one table per model
    measured = read_levels(folder)
    assert len(measured) == 12
    if opts.threads >= 2:  # the host's state was probed before every window, on the served text file
        for m in measured:
            host = m.host
            assert host is not None and host.threads == opts.threads, m
            assert host.one_thread_ms > 0 and host.all_threads_ms > 0, m
            assert m.summary.host_speedup == round(host.one_thread_ms / host.all_threads_ms, 3)
            assert m.summary.host_one_thread_ms == host.one_thread_ms  # the host's own speed, for the verdicts' note
        assert report.count("The host before each window") == 2
    # interleaved: each level on both targets back to back, the order reversed at the next level
    assert [(m.summary.label, m.summary.target) for m in measured if m.summary.model == "digit_classifier"][:4] == [
        ("c=1", "minimal_fastapi"), ("c=1", "this_project"), ("c=4", "this_project"), ("c=4", "minimal_fastapi")]
    with gzip.open(folder / "requests.jsonl.gz", "rt") as raw:
        assert len(raw.read().splitlines()) == 12
    assert (folder / "digit_classifier.png").exists() and (folder / "text_embedder.png").exists()

    for name in ("minimal_fastapi", "this_project"):  # stopped: nothing answers on their ports any more
        command = results["targets"][name]["command"]
        port = command.split("--http-port " if name == "this_project" else "--port ")[1].split()[0]
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2)
    json.dumps(results)  # results.json holds only plain data
