"""The suite's entry points: options from the command line, and a clear SKIPPED when the peers are missing."""
import argparse

import pytest

from perf_sweep.errors import SweepPlanError
from perf_sweep.peers.cli import add_peers_parser, options_from_args
from perf_sweep.peers.plan import ModelKind, SuiteTiming, TargetKind
from perf_sweep.peers.suite import PeerSuiteOptions, campaign_peer_section, peers_missing


def parse(*argv):
    parser = argparse.ArgumentParser()
    add_peers_parser(parser.add_subparsers(dest="command"))
    return options_from_args(parser.parse_args(["peers", *argv]))


def test_quick_mode_shortens_levels_and_texts_and_explicit_flags_win():
    opts = parse("--quick", "--window-s", "3", "--targets", "minimal_fastapi", "--models", "digit_classifier")
    assert opts.timing.concurrencies == SuiteTiming.quick().concurrencies and opts.timing.window_s == 3
    assert opts.text_count == 200 and opts.targets == (TargetKind.MINIMAL,) and opts.models == (ModelKind.DIGITS,)


def test_the_default_run_is_the_full_one_in_a_timestamped_peers_folder():
    opts = parse()
    assert opts.timing == SuiteTiming() and opts.text_count is None and opts.threads >= 1
    assert opts.folder.name == f"peers-{opts.run_id}" and opts.folder.parent.name == "perf"
    assert opts.peers_python == opts.peers_venv / "bin" / "python"


def test_options_reject_what_cannot_run():
    with pytest.raises(SweepPlanError, match="threads"):
        PeerSuiteOptions(threads=0)
    with pytest.raises(SweepPlanError, match="models"):
        PeerSuiteOptions(models=())


def test_missing_peers_give_one_skipped_line_naming_the_make_target(tmp_path):
    assert "make setup-peers" in peers_missing(tmp_path / "nope")
    lines = []
    section = campaign_peer_section(tmp_path / "serving.toml", tmp_path / "manifest.json", tmp_path / "peers", True, 0,
                                    lines.append, peers_venv=tmp_path / "nope")
    assert section["skipped"].startswith("peer comparison: SKIPPED:") and "make setup-peers" in section["skipped"]
    assert lines == [f"[perf] {section['skipped']}"]


def test_make_perf_measures_the_running_servers_of_its_manifest_without_starting_or_stopping_them(tmp_path):
    import json

    from perf_sweep.peers.suite import _running_project

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"models": {"digit_classifier": {"http": "127.0.0.1:41000"},
                                               "text_embedder": {"http": "127.0.0.1:41010"}}}))
    running = _running_project(PeerSuiteOptions(project_manifest=manifest))
    assert running.pid is None and not running.launch.stop_argv and not running.launch.argv
    assert running.infer_urls[ModelKind.TEXT] == "http://127.0.0.1:41010/v2/models/text_embedder/infer"
    assert str(manifest) in running.launch.description


def test_a_target_that_was_not_measured_fails_the_command_after_the_report(monkeypatch, tmp_path):
    from perf_sweep.errors import SweepRunError
    from perf_sweep.peers import cli, suite

    parser = argparse.ArgumentParser()
    add_peers_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["peers", "--out-root", str(tmp_path)])
    results = {"targets": {"minimal_fastapi": {"measured": True},
                           "this_project": {"measured": False, "error": "did not start (exit 1): serving serve\nlog"}}}
    monkeypatch.setattr(suite, "run_peer_suite", lambda opts, progress: results)
    with pytest.raises(SweepRunError, match="this_project: did not start") as caught:
        cli.run_peers_command(args)
    assert "report.md" in str(caught.value) and "minimal_fastapi" not in str(caught.value)
    results["targets"]["this_project"] = {"measured": True}
    assert cli.run_peers_command(args) == 0


def test_the_make_perf_section_measures_only_the_runs_selected_models(monkeypatch, tmp_path):
    """`perf_sweep run --models digit_classifier` ran the peers on the text embedder too (~10 min, and
    text verdicts in a run that excluded it)."""
    from perf_sweep.peers import suite

    seen = []
    monkeypatch.setattr(suite, "peers_missing", lambda venv, targets=None: None)
    monkeypatch.setattr(suite, "run_peer_suite", lambda opts, progress: seen.append(opts) or {"summary": "s", "headlines": []})
    args = (tmp_path / "serving.toml", tmp_path / "manifest.json", tmp_path / "peers", True, 0, lambda line: None)
    suite.campaign_peer_section(*args, models=("digit_classifier", "digit_classifier_small"))
    suite.campaign_peer_section(*args)
    assert [o.models for o in seen] == [(ModelKind.DIGITS,), tuple(ModelKind)]
    skipped = suite.campaign_peer_section(*args, models=("digit_classifier_small",))
    assert "SKIPPED" in skipped["skipped"] and "digit_classifier_small" in skipped["skipped"] and len(seen) == 2


def test_levels_jsonl_is_read_back_as_written_summary_and_host_probe(tmp_path):
    """levels.jsonl's one reader (`read_levels`): each line's LevelSummary and the host's state before its window."""
    from types import SimpleNamespace

    from perf_sweep.peers.machine import HostParallelism, QuietWait
    from perf_sweep.peers.stats import LevelSummary
    from perf_sweep.peers.suite import LEVELS_FILE, _record_level, read_levels

    summary = LevelSummary(target="this_project", model="digit_classifier", mode="closed", load=1, label="c=1", warmup_s=1,
                           window_s=10, sent=12, warmup_requests=2, measured=10, outcomes={"ok": 10}, ok=10, throughput=1.0,
                           p50_ms=1.0, p95_ms=2.0, p99_ms=3.0, mean_ms=1.5, stalled=0, send_lag_p99_ms=0.0, min_score=1.0,
                           client_cpu=0.1, first_error=None, host_speedup=1.8, host_one_thread_ms=9.0)
    state = SimpleNamespace(opts=SimpleNamespace(folder=tmp_path))
    host = HostParallelism(one_thread_ms=9.0, all_threads_ms=5.0, threads=2)
    _record_level(state, summary, [], QuietWait(0.5, 0.1, True), host)
    _record_level(state, summary, [], QuietWait(0.5, 0.1, True), None)
    assert (tmp_path / LEVELS_FILE).exists()
    assert [(line.summary, line.host) for line in read_levels(tmp_path)] == [(summary, host), (summary, None)]
