from contracts.devices import detect_nvidia_gpu, visible_gpus

LISTED = ("GPU 0: NVIDIA H200 (UUID: GPU-aaa)", "GPU 1: NVIDIA H200 (UUID: GPU-bbb)")


def test_cuda_visible_devices_selects_like_the_cuda_runtime():
    assert visible_gpus(LISTED, {}) == LISTED
    assert visible_gpus(LISTED, {"CUDA_VISIBLE_DEVICES": "1"}) == LISTED[1:]
    assert visible_gpus(LISTED, {"CUDA_VISIBLE_DEVICES": "GPU-bbb,0"}) == (LISTED[1], LISTED[0])
    assert visible_gpus(LISTED, {"CUDA_VISIBLE_DEVICES": ""}) == ()
    assert visible_gpus(LISTED, {"CUDA_VISIBLE_DEVICES": "-1"}) == ()
    assert visible_gpus(LISTED, {"CUDA_VISIBLE_DEVICES": "0,7,1"}) == LISTED[:1]  # stops at the first invalid index


def test_probe_on_this_machine_says_why_when_there_is_no_gpu(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    probe = detect_nvidia_gpu()
    assert not probe.present and "nvidia-smi is not installed" in probe.detail and probe.gpus == ()


def test_cpu_info_from_proc_cpuinfo_text():
    from contracts.devices import cpu_info_from_text

    text = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse avx2 fma\n\nprocessor\t: 1\nmodel name\t: AMD EPYC\n"
    cpu = cpu_info_from_text(text, 2)
    assert cpu.model == "AMD EPYC" and "avx2" in cpu.flags and not cpu.int8_dot_product
    assert cpu.describe() == "AMD EPYC, 2 logical CPUs, SIMD: AVX2"
    vnni = cpu_info_from_text("model name: Xeon\nsiblings: 4\ncpu cores: 2\nflags: avx2 avx512f avx512_vnni\n", 4)
    assert vnni.int8_dot_product and vnni.threads_per_core == 2
    assert vnni.describe(usable_cpus=3) == "Xeon, 4 logical CPUs (3 usable), SIMD: AVX2, AVX-512, AVX-512 VNNI"


def test_tensorrt_detection_on_a_gpu_host_names_the_version_and_the_gpu(monkeypatch):
    """The path a GPU host takes (its success line named a variable that did not exist: NameError,
    so `make build-engines` failed on exactly the hosts TensorRT is for). The driver, libcuda and
    TensorRT are stood in for: this checks the probe's own logic, not TensorRT."""
    import ctypes
    import sys
    import types

    from contracts import devices

    gpu_line = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"
    monkeypatch.setattr(devices, "detect_nvidia_gpu", lambda: devices.GpuProbe(True, gpu_line, (gpu_line,)))
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())
    fake = types.SimpleNamespace(__version__="10.5.0", Logger=type("Logger", (), {"ERROR": 1, "__init__": lambda self, level: None}),
                                 Builder=lambda logger: object())
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    assert devices.detect_tensorrt() == devices.TensorRTAvailability(True, f"TensorRT 10.5.0; {gpu_line}")


def test_a_cgroup_cpu_quota_is_read_from_v2_and_v1_files_tightest_first():
    from contracts.devices import cpu_quota_from_cgroups

    v2 = {"/sys/fs/cgroup/kubepods/pod1/cpu.max": "max 100000", "/sys/fs/cgroup/kubepods/cpu.max": "250000 100000"}
    assert cpu_quota_from_cgroups("0::/kubepods/pod1\n", v2.get) == 2.5  # the parent's quota binds
    assert cpu_quota_from_cgroups("0::/\n", {"/sys/fs/cgroup/cpu.max": "max 100000"}.get) is None
    # a container without a cgroup namespace: the host path does not exist, its own group is the mount's root
    v1 = {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "150000", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000"}
    assert cpu_quota_from_cgroups("5:memory:/docker/x\n4:cpu,cpuacct:/docker/x\n", v1.get) == 1.5
    unlimited = {"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}
    assert cpu_quota_from_cgroups("1:cpu:/\n", unlimited.get) is None
    assert cpu_quota_from_cgroups("0::/\n", {"/sys/fs/cgroup/cpu.max": "garbage"}.get) is None
    assert cpu_quota_from_cgroups("", {}.get) is None


def test_the_threads_of_one_core_stand_together_so_a_partition_takes_whole_cores():
    """On an SMT host the kernel numbers a core's threads N/2 apart: runs of CPU numbers gave each of two
    partitions one thread of every core (a review, 2026-12-08)."""
    from contracts.devices import cpus_by_core, parse_cpu_list
    from contracts.layout import SERVING_CONFIG
    from contracts.partition_plan import plan_partitions
    from contracts.serving_spec import load_serving_spec

    assert parse_cpu_list("0-2,8\n") == (0, 1, 2, 8) and parse_cpu_list("0,4") == (0, 4) and parse_cpu_list("") == ()
    siblings = {cpu: (cpu % 4, cpu % 4 + 4) for cpu in range(8)}
    assert cpus_by_core(range(8), siblings) == (0, 4, 1, 5, 2, 6, 3, 7)
    assert cpus_by_core([1, 2, 5, 6], siblings) == (1, 5, 2, 6)  # an affinity subset keeps its own CPUs only
    assert cpus_by_core([0, 1, 2], {}) == (0, 1, 2)  # no topology known: one core a CPU
    plan = plan_partitions(load_serving_spec(SERVING_CONFIG), 8, False, cpus_by_core(range(8), siblings))
    assert [p.cpus for p in plan.partitions] == [(0, 1, 4, 5), (2, 3, 6, 7)]
    assert all(p.runs_on == tuple(range(8)) for p in plan.partitions)
