"""The machine every figure belongs to: CPU model, cores and the SIMD flags that decide INT8 speed."""
import sys

from contracts.devices import cpu_info_from_text
from perf_sweep.peers.machine import busy_cores_between, cpu_jiffies, cpu_record, package_versions, wait_until_quiet

CPUINFO = "processor\t: 0\nmodel name\t: AMD EPYC\nsiblings\t: 2\ncpu cores\t: 2\nflags\t\t: fpu sse avx avx2 fma\n"


def test_a_runs_cpu_record_is_read_as_the_rest_of_the_project_reads_the_cpu():
    cpu = cpu_record(cpu_info_from_text(CPUINFO, 2), usable_cpus=2)
    assert cpu["model"] == "AMD EPYC" and cpu["cpus"] == 2 and cpu["threads_per_core"] == 1
    assert cpu["flags"]["avx2"] and not cpu["flags"]["avx512f"] and not cpu["flags"]["avx512_vnni"]
    assert cpu["description"] == "AMD EPYC, 2 logical CPUs (2 usable), SIMD: AVX2"


def test_a_cpu_without_simd_flags_is_described_as_such_not_guessed():
    cpu = cpu_record(cpu_info_from_text("", 1), usable_cpus=1)
    assert cpu["model"] == "unknown CPU" and "none of AVX2/AVX-512" in cpu["description"]


def test_package_versions_are_read_by_the_interpreter_that_runs_them():
    versions = package_versions(sys.executable, ["numpy", "surely-not-installed-xyz"])
    assert versions["numpy"] and versions["surely-not-installed-xyz"] is None
    assert package_versions("/nonexistent/python", ["numpy"]) == {}


def test_busy_cores_come_from_proc_stat_without_idle_and_iowait():
    before = cpu_jiffies("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n")
    after = cpu_jiffies("cpu  250 0 100 850 100 0 0 0 0 0\ncpu0 125 0 50 425 50 0 0 0 0 0\n")
    assert before == (150, 1000) and after == (350, 1300)
    assert busy_cores_between(before, after, cpus=2) == 2 * 200 / 300
    assert busy_cores_between(before, before, cpus=2) == 0.0


def test_a_level_waits_for_the_last_levels_backlog_and_gives_up_after_the_timeout():
    readings = iter([1.9, 1.8, 0.2, 0.1])
    quiet = wait_until_quiet(0.05, 0.35, timeout_s=60, sample=lambda: next(readings))
    assert quiet.quiet and quiet.busy_cores == 0.1
    busy = wait_until_quiet(0.05, 0.35, timeout_s=0, sample=lambda: 1.9)
    assert not busy.quiet and busy.busy_cores == 1.9


def test_the_parallelism_probe_times_both_sessions_of_a_real_onnx_file(tmp_path):
    import math

    import numpy as np
    import pytest

    from perf_sweep.peers.machine import HostParallelism, ParallelismProbe
    from tiny_onnx_models import masked_embedding_model, save

    onnx_file = save(masked_embedding_model(), tmp_path / "model.onnx")
    ids = np.array([[1, 2, 3, 4]], dtype=np.int64)
    probe = ParallelismProbe(onnx_file, {"input_ids": ids, "attention_mask": np.ones_like(ids)}, threads=2, runs=3)
    host = probe.measure()
    assert host.threads == 2 and host.one_thread_ms > 0 and host.all_threads_ms > 0
    assert host.speedup == pytest.approx(host.one_thread_ms / host.all_threads_ms)
    assert math.isnan(HostParallelism(1.0, 0.0, 2).speedup)
    with pytest.raises(ValueError, match="threads >= 2"):
        ParallelismProbe(onnx_file, {}, threads=1)


def test_a_report_names_the_commit_it_measured_and_says_when_the_tree_differed(tmp_path):
    """Neither report named the code it measured (a review, 2026-12-07)."""
    import subprocess

    from perf_sweep.peers.machine import source_revision

    assert source_revision(tmp_path).startswith("unknown")
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True, text=True).stdout
    git("init", "-q")
    (tmp_path / "f.py").write_text("x = 1\n")
    git("add", "f.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = git("rev-parse", "--short=12", "HEAD").strip()
    assert source_revision(tmp_path) == head
    (tmp_path / "f.py").write_text("x = 2\n")
    assert source_revision(tmp_path) == f"{head} + uncommitted changes"
