"""The preloaded helpers' environment (serving.runtime.native): which libraries a server gets and
which variables tell them what to do, and the build the Kubernetes image runs. The libraries'
effect on a real tritonserver is tests/integration/test_http_compression.py."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import PurePosixPath

import pytest

from contracts.layout import PROJECT_ROOT
from serving.runtime.native import (CAP_ENV, COND_WAIT_CAP, GZIP_LEVEL, GZIP_LEVEL_ENV, HELPERS, preload_environment,
                                    preload_variables, wanted_helpers)


def libraries(tmp_path):
    cap, gzip = tmp_path / "libcond_wait_cap.so", tmp_path / "libgzip_level.so"
    cap.write_bytes(b""), gzip.write_bytes(b"")
    return cap, gzip


def test_both_helpers_are_preloaded_before_an_inherited_preload_with_their_settings(tmp_path):
    cap, gzip = libraries(tmp_path)
    env, warning = preload_environment(10000, {"LD_PRELOAD": "/x/other.so", "KEEP": "1"}, library=cap,
                                       gzip_level=0, gzip_library=gzip)
    assert env["LD_PRELOAD"] == f"{cap}:{gzip}:/x/other.so"
    assert env[CAP_ENV] == "10000" and env[GZIP_LEVEL_ENV] == "0" and env["KEEP"] == "1" and warning is None


def test_a_helper_not_asked_for_is_neither_preloaded_nor_configured(tmp_path):
    cap, gzip = libraries(tmp_path)
    env, warning = preload_environment(0, {}, library=cap, gzip_level=None, gzip_library=gzip)
    assert env == {} and warning is None
    env, _ = preload_environment(0, {}, library=cap, gzip_level=6, gzip_library=gzip)
    assert env == {"LD_PRELOAD": str(gzip), GZIP_LEVEL_ENV: "6"}
    env, _ = preload_environment(0, {}, library=cap, gzip_level="off", gzip_library=gzip)
    assert env == {"LD_PRELOAD": str(gzip), GZIP_LEVEL_ENV: "off"}


def test_a_missing_library_is_named_in_the_warning_and_the_other_still_preloaded(tmp_path):
    cap, gzip = libraries(tmp_path)
    gzip.unlink()
    env, warning = preload_environment(2000, {}, library=cap, gzip_level=1, gzip_library=gzip)
    assert env["LD_PRELOAD"] == str(cap) and GZIP_LEVEL_ENV not in env
    assert str(gzip) in warning and "make setup" in warning and "level 6" in warning


def test_preload_variables_are_pure_and_put_the_helpers_before_an_inherited_preload():
    wanted = wanted_helpers(2000, 0)
    assert wanted == {COND_WAIT_CAP: 2000, GZIP_LEVEL: 0}
    assert wanted_helpers(0, None) == {} and preload_variables({}, lambda h: PurePosixPath("/x")) == {}
    variables = preload_variables(wanted, lambda h: PurePosixPath("/pod/lib") / h.library.name, "/x/other.so")
    assert variables == {"LD_PRELOAD": "/pod/lib/libcond_wait_cap.so:/pod/lib/libgzip_level.so:/x/other.so",
                         CAP_ENV: "2000", GZIP_LEVEL_ENV: "0"}


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler on PATH")
def test_the_images_build_command_builds_every_helper_with_the_standard_library_alone(tmp_path):
    """deploy/image/Dockerfile runs `python3 -m serving.runtime.native DIR` in a stage that has only
    the server image's Python and the `serving` sources: -S keeps site-packages out, as there."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "scripts")}
    done = subprocess.run([sys.executable, "-S", "-m", "serving.runtime.native", str(tmp_path / "lib")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    for helper in HELPERS:
        built = tmp_path / "lib" / helper.library.name
        assert built.is_file() and built.read_bytes()[:4] == b"\x7fELF", f"{built} was not built"
    usage = subprocess.run([sys.executable, "-S", "-m", "serving.runtime.native"], capture_output=True, text=True, env=env)
    assert usage.returncode == 2 and "DIR" in usage.stderr
