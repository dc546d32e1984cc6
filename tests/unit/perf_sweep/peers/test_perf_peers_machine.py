"""The machine every figure belongs to: CPU model, cores and the SIMD flags that decide INT8 speed."""
import sys

from perf_sweep.peers.machine import cpu_from_lscpu, describe_cpu, package_versions

LSCPU = """Architecture:                            x86_64
CPU(s):                                  2
Thread(s) per core:                      1
Model name:                              AMD EPYC
Flags:                                   fpu sse sse2 avx avx2 fma
"""


def test_cpu_from_lscpu_reads_model_cores_and_simd_flags():
    cpu = cpu_from_lscpu(LSCPU)
    assert cpu["model"] == "AMD EPYC" and cpu["cpus"] == 2 and cpu["threads_per_core"] == 1
    assert cpu["flags"]["avx2"] and not cpu["flags"]["avx512f"] and not cpu["flags"]["avx512_vnni"]
    assert describe_cpu(cpu, 2) == "AMD EPYC, 2 CPUs usable (2 online), SIMD: avx2"


def test_a_machine_without_lscpu_is_described_as_unknown_not_guessed():
    cpu = cpu_from_lscpu("")
    assert cpu["model"] == "unknown" and "none of avx2" in describe_cpu(cpu, 1)


def test_package_versions_are_read_by_the_interpreter_that_runs_them():
    versions = package_versions(sys.executable, ["numpy", "surely-not-installed-xyz"])
    assert versions["numpy"] and versions["surely-not-installed-xyz"] is None
    assert package_versions("/nonexistent/python", ["numpy"]) == {}
