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
