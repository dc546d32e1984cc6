"""serving.runtime.pod_liveness's pure parts; the check itself against a real tritonserver whose stub
died: tests/integration/test_faults.py::test_a_dead_backend_stub_gives_explicit_errors_until_the_model_is_reloaded."""
from __future__ import annotations

from serving.runtime.pod_liveness import find_server_pid, missing_stubs


def test_a_model_with_fewer_live_stubs_than_its_instances_is_named():
    expected = {"digit_classifier": 2, "text_encoder": 2, "text_tokenizer": 1}
    assert missing_stubs(expected, {"digit_classifier": 2, "text_encoder": 2, "text_tokenizer": 1}) == {}
    assert missing_stubs(expected, {"digit_classifier": 1, "text_encoder": 3}) == {
        "digit_classifier": (1, 2), "text_tokenizer": (0, 1)}  # more than asked (a reload under way) is fine


def test_the_server_is_the_lowest_pid_named_tritonserver(tmp_path):
    for pid, name in ((7, "tritonserver"), (1, "sh"), (3, "tritonserver"), (9, "triton_python_b")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(name + "\n")
    (tmp_path / "self").mkdir()
    assert find_server_pid(tmp_path) == 3
    assert find_server_pid(tmp_path / "self") is None
