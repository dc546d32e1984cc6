"""ONNX Runtime's telemetry stays off: in a served partition's backend stubs, and wherever this
project's entry points open a session (contracts.onnx_sessions.keep_onnxruntime_offline says why)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from contracts.onnx_sessions import TELEMETRY_OPT_OUT_ENV
from conftest import REPOSITORY

#: Where ONNX Runtime 1.29+ keeps its device id and queued events, under the process's HOME.
TELEMETRY_CACHE = Path(".cache/Microsoft/DeveloperTools/.onnxruntime")
MODEL = "digit_classifier"
OPEN_A_SESSION = ("import sys, onnxruntime as ort; "
                  "ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])")


#: ONNX Runtime 1.32 records nothing where one of these is set (it takes the run for CI; the names are
#: in its library's strings): removed, so that the processes here behave as on a production host.
CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "TF_BUILD", "SYSTEM_TEAMFOUNDATIONCOLLECTIONURI", "JENKINS_URL",
                "BUILDKITE", "CIRCLECI", "TRAVIS", "TEAMCITY_VERSION", "CODEBUILD_BUILD_ID")


def _environment_without_the_opt_out(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != TELEMETRY_OPT_OUT_ENV and k not in CI_VARIABLES}
    env["HOME"] = str(home)
    return env


@pytest.mark.parametrize("opt_out, records", [(None, True), ("1", False)])
def test_onnxruntime_records_telemetry_unless_opted_out_before_it_starts(tmp_path, opt_out, records):
    """The premise, in a plain process. If a later ONNX Runtime stops recording, the first case fails
    and says so: the opt-out can then go."""
    env = _environment_without_the_opt_out(tmp_path)
    if opt_out:
        env[TELEMETRY_OPT_OUT_ENV] = opt_out
    subprocess.run([sys.executable, "-c", OPEN_A_SESSION, str(REPOSITORY / MODEL / "1" / "model.onnx")],
                   env=env, check=True, timeout=120)
    assert (tmp_path / TELEMETRY_CACHE / "deviceid").exists() is records, sorted(tmp_path.rglob("*"))


@pytest.mark.parametrize("entry_point", ["model_build.cli", "perf_sweep.cli", "operations.gpu_check"])
def test_the_entry_points_opt_out_before_anything_imports_onnxruntime(entry_point, monkeypatch):
    """`python -m perf_sweep ...` run by hand, outside make: its main() sets the default first (these
    modules import onnxruntime only inside the functions main() calls), and keeps an explicit choice."""
    import importlib

    main = importlib.import_module(entry_point).main
    for given, kept in ((None, "1"), ("0", "0")):
        if given is None:
            monkeypatch.delenv(TELEMETRY_OPT_OUT_ENV, raising=False)
        else:
            monkeypatch.setenv(TELEMETRY_OPT_OUT_ENV, given)
        with pytest.raises(SystemExit):
            main(["--help"])
        assert os.environ[TELEMETRY_OPT_OUT_ENV] == kept


@pytest.mark.server
def test_a_servers_backend_stubs_run_onnxruntime_without_telemetry(tmp_path, monkeypatch):
    """Started from a shell without the Makefile's export (the variable removed here), the launcher
    still gives the server, and so every backend stub, the opt-out: the stubs answer, their
    environment carries it, and nothing is written under their HOME."""
    from conftest import start_test_server
    from model_client.client import TritonModelClient
    from serving.runtime.stub_processes import scan_stubs

    monkeypatch.delenv(TELEMETRY_OPT_OUT_ENV, raising=False)
    for name in CI_VARIABLES:  # as on a production host, where ONNX Runtime would record
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    server = start_test_server(tmp_path, (MODEL,), env={"HOME": str(home)})
    try:
        with TritonModelClient(server.url("http"), "http") as client:
            for _ in range(4):
                client.infer(MODEL, {"image": np.zeros((1, 1, 8, 8), np.float32)})
        stubs = scan_stubs(server.process.process.pid)
        assert stubs, "the model runs in backend stubs"
        for stub in stubs:
            # booleans, so a failure does not print the stub's whole environment into the log
            environment = Path(f"/proc/{stub.pid}/environ").read_bytes().split(b"\0")
            opted_out = f"{TELEMETRY_OPT_OUT_ENV}=1".encode() in environment
            assert opted_out, f"{stub} runs without {TELEMETRY_OPT_OUT_ENV}=1"
            in_fresh_home = f"HOME={home}".encode() in environment
            assert in_fresh_home, f"{stub} does not run with HOME={home}"
        assert not (home / TELEMETRY_CACHE).exists(), sorted(home.rglob("*"))
    finally:
        server.discard()
