"""One short end-to-end sweep: real perf_analyzer 2.51 against the session's real tritonserver."""
import json

import pytest

from perf_sweep import inputs as gen
from perf_sweep.campaign import knee_of
from perf_sweep.plan import LoadMode, Measurement, RequestParameter, SweepSpec
from perf_sweep.runner import RunFolder, run_sweep

pytestmark = pytest.mark.server

#: Short windows that always pass the stability check (max/min within 100%): seconds, not minutes.
QUICK = Measurement(interval_ms=500, stability_percentage=100, max_trials=3, warmup_requests=10)


def test_concurrency_and_poisson_priority_sweep_against_real_server(triton_server, digits_test_split, tmp_path):
    images, _ = digits_test_split
    input_file = gen.write_input_data(tmp_path / "digits.json",
                                      gen.image_input_data(gen.sample_digit_images(images, 64, seed=0), "image"))
    folder = RunFolder(tmp_path / "run")
    common = dict(model="digit_classifier", url=triton_server.grpc_url, input_data=str(input_file),
                  measurement=QUICK, metrics_url=triton_server.metrics_url)
    lines: list[str] = []
    closed, latencies = run_sweep(SweepSpec(name="it.concurrency", levels=(1, 4), **common), folder, lines.append)
    open_loop, _ = run_sweep(SweepSpec(name="it.poisson", levels=(40,), mode=LoadMode.REQUEST_RATE,
                                       request_parameters=(RequestParameter("priority", "1"),), **common),
                             folder, lines.append)

    assert len(lines) == 3 and all("infer/s" in line for line in lines), lines
    for record in closed + open_loop:
        assert record.status in ("ok", "unstable"), record.note
        assert record.errors == 0 and record.requests > 0
        assert 0 < record.p50_ms <= record.p95_ms <= record.p99_ms
        assert record.server_compute_ms > 0 and record.server_queue_ms >= 0
        # Triton's own counters saw every measured request, and none failed
        assert record.server["requests_failed"] == 0
        assert record.server["requests_succeeded"] >= record.requests
        assert record.server["avg_batch_size"] >= 1
    assert closed[1].server["avg_batch_size"] > 1  # four in flight: the dynamic batcher merged them
    assert len(latencies[1]) > 0
    # 40 req/s offered, all answered; a fixed count (the usual fallback here) is rated from its answers'
    # timestamps, not perf_analyzer's whole-second window (25 infer/s for these 100 requests)
    assert open_loop[0].throughput == pytest.approx(40, rel=0.35), open_loop[0].note
    assert open_loop[0].status == "ok" or "from the export's answers" in open_loop[0].note
    assert knee_of(closed) is not None
    commands = (tmp_path / "run" / "commands.sh").read_text()
    assert commands.count("perf_analyzer") >= 3 and "--request-parameter priority:1:int" in commands
    # level_1.export.json, or level_1_fixed.export.json when the level never stabilised
    (export_path,) = sorted((tmp_path / "run" / "raw" / "it.concurrency").glob("level_1*.export.json"))[-1:]
    export = json.loads(export_path.read_text())
    assert export["experiments"][0]["requests"] and "request_inputs" not in export["experiments"][0]["requests"][0]
