"""The pods' root filesystem is read-only (`readOnlyRootFilesystem`), with emptyDirs at /tmp and
/dev/shm: rehearsed here with a real tritonserver in a mount namespace whose every mount but those
two is read-only, the model repository and the project's code included (as the pods' /serving)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from k8s_deploy.workload import WRITABLE_PATHS

pytestmark = pytest.mark.server
TESTS = Path(__file__).resolve().parents[1]
MODELS = ("digit_classifier", "text_embedder")
#: Run inside the namespace: start the server with conftest's helper, print its HTTP address, serve
#: until stdin closes, stop.
DRIVER = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from pathlib import Path
from conftest import start_test_server
server = start_test_server(Path("/tmp/server"), {MODELS!r})
print(server.http_url, flush=True)
sys.stdin.read()
server.process.stop()
"""


def _namespace_script(tmp_size_mb: int = 256) -> str:
    """Every mount read-only but /dev/shm (already its own mount, as the pods' memory emptyDir) and
    a fresh tmpfs at /tmp (the pods' /tmp emptyDir)."""
    assert WRITABLE_PATHS == ("/tmp", "/dev/shm"), "rehearse the paths the pods mount writable"
    return ("set -e; for m in $(findmnt -rn -o TARGET | grep -v -E '^/(proc|sys|dev)(/|$)'); do "
            "mount -o remount,bind,ro \"$m\"; done; "
            f"mount -t tmpfs -o size={tmp_size_mb}m tmpfs /tmp; exec \"$0\" -c \"$1\"")


def _can_make_a_read_only_namespace() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("findmnt"):
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -o remount,bind,ro / && ! touch /.rofs-probe 2>/dev/null"], capture_output=True, timeout=30)
    return probe.returncode == 0


def _post(http_url: str, model: str, body: dict) -> dict:
    request = urllib.request.Request(f"http://{http_url}/v2/models/{model}/infer", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def test_the_served_models_load_and_answer_with_only_tmp_and_dev_shm_writable():
    """What the pods' `readOnlyRootFilesystem: true` needs, found on a host: Triton's Python backend
    makes a /tmp/python_env_* folder per Python-based backend, the stubs talk through /dev/shm, and
    nothing else is written (ONNX Runtime's telemetry cache under $HOME is off: test_onnxruntime_telemetry.py)."""
    if not _can_make_a_read_only_namespace():
        pytest.skip("needs root and util-linux's unshare/findmnt to rehearse a read-only root in a mount namespace")
    driver = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", _namespace_script(),
                               sys.executable, DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        http_url = driver.stdout.readline().strip()
        assert http_url, f"the server did not start under a read-only root (exit {driver.poll()})"
        digits = _post(http_url, "digit_classifier", {"inputs": [
            {"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0.0] * 64}]})
        assert len(digits["outputs"][0]["data"]) == 10
        text = _post(http_url, "text_embedder", {"inputs": [
            {"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["a read-only root filesystem"]}]})
        assert len(text["outputs"][0]["data"]) == 384
    finally:
        driver.stdin.close()
        driver.wait(timeout=60)
    assert driver.returncode == 0
