"""The peer report: machine first, headlines with met/missed, a table per model, accounting, commands."""
from perf_sweep.peers.report import campaign_section_lines, model_tables, render_peer_markdown, write_peer_report
from perf_sweep.peers.plan import ModelKind, SuiteTiming
from perf_sweep.peers.verdicts import all_verdicts, verdict_summary
from test_perf_peers_verdicts import level

D, T = "digit_classifier", "text_embedder"


def results_with(levels):
    limits = {T: {"best": {"batch_size": 32, "throughput": 150.0, "batch_latency_ms": 213.0, "how": "padded"},
                  "runs": {"before": [{"batch_size": 32, "throughput": 150.0, "batch_latency_ms": 213.0, "how": "padded"}]},
                  "text": "tokenize + encode"}}
    verdicts = all_verdicts(levels, {m: e["best"] for m, e in limits.items()})
    return {"run_id": "20260101-000000", "command": "python -m perf_sweep peers", "timing": SuiteTiming().__dict__,
            "machine": {"description": "AMD EPYC, 2 CPUs usable (2 online), SIMD: avx2", "memory_gib": 23.5,
                        "python": "3.11.7", "kernel": "6.1", "load_average": 1.5, "load_average_end": 2.0},
            "versions": {"main": {"onnxruntime": "1.32.0"}, "peers": {"fastapi": "0.165.0"}, "tritonserver": {}},
            "inputs": {D: "359 images", T: "714 sentences"},
            "targets": {"minimal_fastapi": {"measured": True, "description": "FastAPI", "command": "python app.py",
                                            "load_average_before": 1.0},
                        "infinity_emb": {"measured": False, "error": "did not start", "load_average_before": 1.0}},
            "levels": [s.as_dict() for s in levels], "limits": limits,
            "headlines": [v.headline for v in verdicts], "summary": verdict_summary(verdicts),
            "poisson_lines": [], "project_running_servers": None}


LEVELS = [level("minimal_fastapi", D, 1, 1000, 2.0, p50=0.9), level("this_project", D, 1, 950, 2.1, p50=1.0),
          level("minimal_fastapi", T, 1, 120, 12.0), level("this_project", T, 1, 90, 14.0, errors=2),
          level("this_project", D, 300, 299, 3.0, mode="poisson")]


def test_each_model_has_a_row_per_target_and_a_column_per_level():
    lines = model_tables(LEVELS, ModelKind.DIGITS)
    assert "| target | c=1 |" in lines
    assert "| minimal_fastapi | 1,000 · 0.90/2.00/2.00 |" in lines
    assert any(line.startswith("| this_project | 299 ·") for line in lines)  # the Poisson table
    text = model_tables(LEVELS, ModelKind.TEXT)
    assert "| this_project | 90 · 1.00/14.00/14.00 (2 err) |" in text


def test_the_report_states_the_machine_headlines_commands_and_failures():
    text = render_peer_markdown(results_with(LEVELS), {"digits": "digit_classifier.png"})
    assert text.index("**Machine**: AMD EPYC") < text.index("## Headlines")
    assert "issue 10 targets:" in text and "[MISSED]" in text and "[MET]" in text
    assert "`python app.py`" in text and "NOT measured: did not start" in text
    assert "## Every request accounted for" in text and "## Fairness rules" in text
    assert "![digits](digit_classifier.png)" in text


def test_write_peer_report_draws_one_plot_per_measured_model(tmp_path):
    path = write_peer_report(tmp_path, results_with(LEVELS))
    assert path.read_text().count("](digit_classifier.png)") == 1
    assert (tmp_path / "digit_classifier.png").stat().st_size > 0 and (tmp_path / "text_embedder.png").exists()


def test_the_campaign_section_links_the_full_report_or_says_skipped():
    assert campaign_section_lines({"skipped": "peer comparison: SKIPPED: no .venv/peers."})[2].startswith(
        "peer comparison: SKIPPED")
    lines = campaign_section_lines({"summary": "issue 10 targets: 1 met", "report": "peers/report.md", "headlines": ["a"]})
    assert "[peers/report.md](peers/report.md)" in lines[2] and "- a" in lines


def test_this_projects_levels_show_what_its_server_saw():
    from dataclasses import replace

    from perf_sweep.peers.report import inside_server_table

    seen = {"requests": 900.0, "executions": 900.0, "queue_ms_per_request": 0.05, "compute_infer_ms_per_request": 2.6,
            "framework_ms_per_execution": 2.1, "rest_of_execute_ms_per_execution": None, "requests_per_execution": 1.0,
            "wide_session_share": 0.93, "sibling_busy_share": 0.0, "cores_busy_share": 0.05, "settling_share": 0.01}
    levels = [replace(LEVELS[3], server=seen), LEVELS[2]]
    lines = inside_server_table(levels, ModelKind.TEXT)
    assert "| c=1 | 1.00 | 1.00 | 0.050 | 2.600 | 2.100 | - | 93% | 0% | 5% | 1% |" in lines
    older = {k: v for k, v in seen.items() if not k.endswith("_share")}  # levels.jsonl of earlier runs
    assert "| c=1 | 1.00 | 1.00 | 0.050 | 2.600 | 2.100 | - | - | - | - | - |" in inside_server_table([replace(LEVELS[3], server=older)], ModelKind.TEXT)
    assert inside_server_table(LEVELS, ModelKind.TEXT) == []  # the peers' levels and levels without it: no table
    text = render_peer_markdown(results_with(levels), {})
    assert "Inside this project's server" in text


def test_the_host_state_before_each_window_has_a_table_when_probed():
    from dataclasses import replace

    from perf_sweep.peers.report import host_table

    probed = [replace(LEVELS[3], host_speedup=1.63, host_one_thread_ms=5.15), replace(LEVELS[2], host_speedup=0.99)]
    lines = host_table(probed, ModelKind.TEXT)
    assert any(line.startswith("| this_project | x1.63 · 5.15 ms") for line in lines), lines
    assert any("x0.99" in line for line in lines) and host_table(LEVELS, ModelKind.TEXT) == []
    assert "The host before each window" in render_peer_markdown(results_with(probed), {})


def test_the_poisson_rates_name_the_target_that_set_them():
    """Without the minimal server (not selected, or it did not start) PyTriton's peak set the rates, and
    the report still said "x the minimal server's best closed-loop throughput"."""
    results = {**results_with(LEVELS), "reference_targets": {D: "pytriton"}, "reference_peaks": {D: 900.0}}
    text = render_peer_markdown(results, {})
    assert "digit_classifier: pytriton, 900.0 images/s" in text
    assert "minimal server's best closed-loop" not in text
    assert "x the minimal server's best closed-loop throughput" in render_peer_markdown(results_with(LEVELS), {})


def test_the_suite_records_which_target_set_the_poisson_rates(monkeypatch, tmp_path):
    from perf_sweep import http_load
    from perf_sweep.http_load import LevelRun
    from perf_sweep.peers import machine, suite
    from perf_sweep.peers.plan import TargetKind
    from perf_sweep.peers.stats import Outcome, RequestRecord

    def run_level(workload, level, timeout_s, seed=0):
        rate = 100.0 if workload.target == "pytriton" else 50.0
        n = int(rate * level.window_s)
        return LevelRun(tuple(RequestRecord(i, level.warmup_s + i / rate, level.warmup_s + i / rate,
                                            level.warmup_s + i / rate + 0.001, Outcome.OK) for i in range(n)),
                        level.warmup_s, 0.1)

    monkeypatch.setattr(http_load, "run_level", run_level)
    monkeypatch.setattr(machine, "wait_until_quiet", lambda *a, **k: machine.QuietWait(0.0, 0.0, True))
    monkeypatch.setattr(suite, "workload_for", lambda state, running, model: type(
        "W", (), {"target": running.launch.target.value})())
    opts = suite.PeerSuiteOptions(out_dir=tmp_path, timing=SuiteTiming(concurrencies=(1,), rate_fractions=(0.5,),
                                                                       warmup_s=0.0, window_s=1.0))
    state = suite.SuiteState(opts, None, None, {})
    running = {t: suite.servers.RunningTarget(suite.servers.Launch(t, (), None, ""), {}, tmp_path)
               for t in (TargetKind.PYTRITON, TargetKind.PROJECT)}  # the minimal server did not start
    suite.measure_model(state, running, ModelKind.DIGITS, lambda line: None)
    assert state.reference_targets == {D: "pytriton"} and state.reference_peaks == {D: 100.0}
    assert sorted({s.load for s in state.summaries if s.mode == "poisson"}) == [50.0]


def test_the_fairness_rules_name_no_files_other_than_the_served_ones():
    """The served text model is the fused text_embedder; the rules said every peer loads
    text_encoder/1/model.onnx and text_tokenizer/1/tokenizer.json, beside the line naming the real ones."""
    served = ("`model_repository/digit_classifier/1/model.onnx`; `model_repository/text_embedder/1/model.onnx` + "
              "`model_repository/text_embedder/1/tokenizer.json` (truncation at 128 tokens; served as one model `text_embedder`)")
    text = render_peer_markdown({**results_with(LEVELS), "served_files": served}, {})
    assert "text_encoder/1/model.onnx" not in text and "text_tokenizer/1/tokenizer.json" not in text
    assert "named under \"Served files\" above" in text
