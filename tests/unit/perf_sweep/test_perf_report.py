"""The Markdown report and PNG plots, rendered from synthetic results."""
import json

from perf_sweep.report import records_table, render_markdown, write_report
from perf_sweep.results import PerfRecord


def record(sweep, load, throughput, p99, status="ok", **extra):
    return PerfRecord(sweep=sweep, model="digits", variant="fp32", mode="concurrency", load=load, batch_size=1,
                      status=status, command="perf_analyzer -m digits", throughput=throughput, p50_ms=p99 / 2,
                      p95_ms=p99 * 0.9, p99_ms=p99, avg_ms=p99 / 2, server_queue_ms=1.0, server_compute_ms=2.0,
                      requests=1000, **extra)


def results():
    records = [record("digits.concurrency", n, 100.0 * min(n, 4), 5.0 * n, server={"avg_batch_size": 3.0, "cpu_utilization": 0.5, "requests_failed": 2})
               for n in (1, 2, 4, 8)]
    records.append(record("digits.concurrency", 16, float("nan"), float("nan"), status="failed", errors=3,
                          note="Exceeds maximum queue size"))
    records.append(record("ab.dynamic.concurrency", 16, 400.0, 30.0))
    return {
        "run_id": "20250101-000000", "command": "python -m perf_sweep run", "host": "test",
        "records": [r.as_dict() for r in records],
        "knees": {"digits.concurrency": {"text": "concurrency 4 (400.0 infer/s, P99 20.0 ms)."}},
        "headlines": ["Dynamic batching vs none at concurrency 16: 2.00x [target >= 2x]"],
        "inputs": {"digits": "360 held-out images"},
        "skipped": ["INT8-mixed vs FP32 served: no INT8 variant"],
        "priority": {"text": ["Realtime alone: P99 3 ms."], "streams": [{"experiment": "priority mix", "variant": "dynamic", "load": "10", "streams": [
            {"stream": "batch", "priority": 2, "requests": 10, "items_ok": 64, "rejected": 2, "other_errors": 0, "throughput": 8.0,
             "p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0, "send_lag_p99_ms": 0.1, "first_error": None}]}]},
    }


def test_records_table_shows_percentiles_queue_compute_errors_and_error_rate():
    rows = records_table([PerfRecord.from_dict(results()["records"][0])])
    assert "P99 ms" in rows[0] and "queue ms" in rows[0] and "error rate" in rows[0]
    assert "| 1 | 100.0 | 2.50 | 4.50 | 5.00 | 1.00 | 2.00 | 3.0 | 50.0% | 1000 | 0 | 2 | 0.2% | ok |" == rows[2]
    # a failure perf_analyzer and Triton both counted is one failure, not two
    both = PerfRecord.from_dict({**results()["records"][0], "errors": 2})
    assert records_table([both])[2].endswith("| 1000 | 0 | 2 | 0.2% | ok |")


def test_markdown_has_every_section_and_marks_failed_levels():
    text = render_markdown(results(), {"Latency vs throughput": "latency_vs_throughput.png"})
    for heading in ("## Headline figures", "## Inputs", "### digits.concurrency", "## A/B comparisons",
                    "## Priority mix", "## Plots", "## Not measured in this run"):
        assert heading in text
    assert "failed: Exceeds maximum queue size" in text
    assert "![Latency vs throughput](latency_vs_throughput.png)" in text


def test_write_report_draws_pngs(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(results()))
    path = write_report(tmp_path, results(), {"realtime alone": [1.0, 2.0, 3.0], "batch": [5.0, 9.0]})
    text = path.read_text()
    for png in ("latency_vs_throughput.png", "ab_latency_vs_throughput.png", "priority_latency_cdf.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png in text


def test_markdown_has_a_section_per_in_process_limit():
    data = results()
    data["limit"] = {"text": "digits in ORT", "points": [{"batch_size": 32, "throughput": 50000.0, "batch_latency_ms": 0.64}]}
    data["limits"] = {"text_embedder": {"text": "tokenize + encode", "unit": "texts/s", "points": [
        {"batch_size": 1, "throughput": 120.0, "batch_latency_ms": 8.3}, {"batch_size": 16, "throughput": 180.0, "batch_latency_ms": 88.9}],
        "runs": {"before": [{"batch_size": 1, "throughput": 120.0, "batch_latency_ms": 8.3},
                            {"batch_size": 16, "throughput": 150.0, "batch_latency_ms": 106.7}],
                 "after": [{"batch_size": 1, "throughput": 110.0, "batch_latency_ms": 9.1},
                           {"batch_size": 16, "throughput": 180.0, "batch_latency_ms": 88.9}]}}}
    text = render_markdown(data, {})
    assert "## In-process ONNX Runtime limit\n\ndigits in ORT" in text
    assert "| 32 | 50000.0 | 0.64 |" in text
    section = text[text.index("## In-process limit of text_embedder"):]
    assert "| batch | texts/s | batch latency ms | texts/s before | texts/s after |" in section
    assert "| 16 | 180.0 | 88.90 | 150.0 | 180.0 |" in section


def test_perf_sweep_report_re_renders_an_older_run_folder(tmp_path, capsys):
    """`python -m perf_sweep report <folder>` reads results.json through the typed reader: a folder
    from before the text limits (no `limits`) still renders; a foreign results.json is named."""
    from perf_sweep.cli import main

    old = results()
    assert "limits" not in old
    (tmp_path / "results.json").write_text(json.dumps(old, indent=1))
    (tmp_path / "latency_samples.json").write_text(json.dumps({"realtime alone": [1.0, 2.0]}))
    assert main(["report", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("# perf_analyzer sweeps: 20250101-000000") and "## Priority mix" in text
    assert "priority_latency_cdf.png" in text and str(tmp_path / "report.md") in capsys.readouterr().out
    peers = tmp_path / "peers"
    peers.mkdir()
    (peers / "results.json").write_text(json.dumps({"run_id": "peers-1", "command": "c", "levels": [], "headlines": []}))
    assert main(["report", str(peers)]) == 1
    assert f"perf_sweep: error: {peers / 'results.json'} lacks ['host', 'records'," in capsys.readouterr().err


def test_a_zero_max_concurrency_is_refused_not_replaced_by_the_default(tmp_path, capsys):
    """`perf_sweep run --max-concurrency 0` ran the default sweep up to 32 (0 read as "not given")."""
    from perf_sweep.cli import main

    assert main(["run", "--max-concurrency", "0", "--out-root", str(tmp_path)]) == 1
    assert "`max_concurrency` = 0 must be >= 1." in capsys.readouterr().err


def test_a_level_perf_analyzer_stopped_at_its_first_error_counts_what_triton_answered():
    """A failed level has no CSV (0 requests), so its error rate read errors / errors = 100%, also for 1
    queue-full rejection among the 4,812 requests Triton answered (a review, 2026-12-06)."""
    from perf_sweep.report import records_table
    from perf_sweep.results import ServerMetrics, record_from_outputs

    server = ServerMetrics(requests_succeeded=4812, requests_failed=1, inferences=4812, executions=900,
                           queue_ms_per_request=1.0, compute_infer_ms_per_request=1.0, cpu_utilization=0.9,
                           cpu_memory_used_mb=100)
    record = record_from_outputs(sweep="m.concurrency", model="m", variant="fp32", mode="concurrency", load=16,
                                 batch_size=1, command=["pa"], csv_text=None,
                                 stdout="Thread [3] had error: queue full\n", server=server)
    row = records_table([record])[-1]
    assert "100.0%" not in row and "| 0.0% |" in row, row  # 1 of 4,813


def test_eleven_ab_sweeps_are_drawn_in_eleven_distinct_styles(tmp_path, monkeypatch):
    """The A/B panel holds 11 closed-loop sweeps with an INT8 build; colours repeat after ten and every
    curve had the same line and marker, so a batcher candidate and the no-batching baseline looked alike."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from perf_sweep.report import plot_latency_vs_throughput
    from perf_sweep.results import PerfRecord

    labels = [f"variant_{i}" for i in range(11)]
    records = [PerfRecord(sweep=f"ab.{l}.concurrency", model=f"m_{l}", variant=l, mode="concurrency", load=c, batch_size=1,
                          status="ok", command="", throughput=100.0 * c + i, p50_ms=1.0, p95_ms=2.0, p99_ms=3.0)
               for i, l in enumerate(labels) for c in (1, 16)]
    styles, original = {}, plt.Figure.savefig

    legend = []

    def grab(self, *args, **kwargs):
        for line in self.axes[0].get_lines():
            if line.get_label().endswith(" P99"):
                styles[line.get_label()] = (line.get_color(), line.get_linestyle(), line.get_marker())
        legend.extend(text.get_text() for text in self.axes[0].get_legend().get_texts())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", grab)
    plot_latency_vs_throughput(records, tmp_path / "ab.png", "t", panel_of=lambda r: "closed loop")
    assert len(styles) == 11 and len(set(styles.values())) == 11, styles
    # one legend entry a sweep and one a percentile: three a sweep (33) squeezed the data to a third
    assert legend == sorted(f"ab.{label}.concurrency" for label in labels) + ["P99", "P95", "P50"], legend
