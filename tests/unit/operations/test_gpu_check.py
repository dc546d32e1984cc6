from contracts.devices import detect_nvidia_gpu
from operations.gpu_check import FAILED, OK, SKIPPED, StepResult, run_checks


def test_without_a_gpu_every_step_says_skipped_and_why(tmp_path):
    if detect_nvidia_gpu().present:
        import pytest

        pytest.skip("a GPU is present: the steps run for real (make gpu-check)")
    lines = []
    results = run_checks(tmp_path / "serving.toml", tmp_path / "repository", tmp_path / "artifacts", lines.append)
    assert [r.status for r in results] == [SKIPPED] * 6
    assert "nvidia-smi" in results[0].detail and all("step 1" in r.detail for r in results[1:])
    assert lines[0].startswith("[gpu-check] GPU and driver: SKIPPED (") and len(lines) == 6
    assert list(tmp_path.iterdir()) == []  # nothing written, no placeholder


def test_a_step_line_names_status_and_reason():
    assert StepResult("x", FAILED, "why").line() == "[gpu-check] x: FAILED (why)"
    assert StepResult("x", OK, "").line() == "[gpu-check] x: OK"
