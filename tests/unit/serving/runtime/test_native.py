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
from serving.runtime.native import (CAP_ENV, COND_WAIT_CAP, GZIP_LEVEL, GZIP_LEVEL_ENV, HELPERS, REQUEST_GUARD,
                                    REQUEST_GUARD_ENV, REQUEST_GUARD_MAX_INPUT_ENV, preload_environment,
                                    preload_variables, wanted_helpers)


def libraries(tmp_path):
    cap, gzip, guard = tmp_path / "libcond_wait_cap.so", tmp_path / "libgzip_level.so", tmp_path / "librequest_guard.so"
    cap.write_bytes(b""), gzip.write_bytes(b""), guard.write_bytes(b"")
    return cap, gzip, guard


def test_every_helper_is_preloaded_before_an_inherited_preload_with_its_settings(tmp_path):
    cap, gzip, guard = libraries(tmp_path)
    env, warning = preload_environment(10000, {"LD_PRELOAD": "/x/other.so", "KEEP": "1"}, library=cap,
                                       gzip_level=0, gzip_library=gzip, guard_library=guard)
    assert env["LD_PRELOAD"] == f"{cap}:{gzip}:{guard}:/x/other.so"
    assert env[CAP_ENV] == "10000" and env[GZIP_LEVEL_ENV] == "0" and env[REQUEST_GUARD_ENV] == "on"
    assert env["KEEP"] == "1" and warning is None


def test_a_helper_not_asked_for_is_neither_preloaded_nor_configured_and_the_guard_always_is(tmp_path):
    cap, gzip, guard = libraries(tmp_path)
    env, warning = preload_environment(0, {}, library=cap, gzip_level=None, gzip_library=gzip, guard_library=guard)
    assert env == {"LD_PRELOAD": str(guard), REQUEST_GUARD_ENV: "on"} and warning is None
    env, _ = preload_environment(0, {}, library=cap, gzip_level=6, gzip_library=gzip, guard_library=guard)
    assert env == {"LD_PRELOAD": f"{gzip}:{guard}", GZIP_LEVEL_ENV: "6", REQUEST_GUARD_ENV: "on"}
    env, _ = preload_environment(0, {}, library=cap, gzip_level="off", gzip_library=gzip, guard_library=guard)
    assert env == {"LD_PRELOAD": f"{gzip}:{guard}", GZIP_LEVEL_ENV: "off", REQUEST_GUARD_ENV: "on"}


def test_a_missing_library_is_named_in_the_warning_and_the_others_still_preloaded(tmp_path):
    cap, gzip, guard = libraries(tmp_path)
    gzip.unlink()
    env, warning = preload_environment(2000, {}, library=cap, gzip_level=1, gzip_library=gzip, guard_library=guard)
    assert env["LD_PRELOAD"] == f"{cap}:{guard}" and GZIP_LEVEL_ENV not in env
    assert str(gzip) in warning and "make setup" in warning and "level 6" in warning


def test_preload_variables_are_pure_and_put_the_helpers_before_an_inherited_preload():
    wanted = wanted_helpers(2000, 0)
    assert wanted == {COND_WAIT_CAP: 2000, GZIP_LEVEL: 0, REQUEST_GUARD: "on"}
    assert wanted_helpers(0, None) == {REQUEST_GUARD: "on"} and preload_variables({}, lambda h: PurePosixPath("/x")) == {}
    variables = preload_variables(wanted, lambda h: PurePosixPath("/pod/lib") / h.library.name, "/x/other.so")
    assert variables == {"LD_PRELOAD": "/pod/lib/libcond_wait_cap.so:/pod/lib/libgzip_level.so:/pod/lib/librequest_guard.so:/x/other.so",
                         CAP_ENV: "2000", GZIP_LEVEL_ENV: "0", REQUEST_GUARD_ENV: "on"}


def test_the_per_input_limit_goes_with_the_guard_and_an_operators_own_value_wins(tmp_path):
    """`[server] max_input_bytes` reaches the guard as its variable (host and pod alike); a value the
    launcher's environment sets already is kept (an operator's, or a test's 0 that lets a crash through)."""
    cap, gzip, guard = libraries(tmp_path)
    env, _ = preload_environment(0, {}, library=cap, gzip_library=gzip, guard_library=guard, max_input_bytes=1 << 20)
    assert env == {"LD_PRELOAD": str(guard), REQUEST_GUARD_ENV: "on", REQUEST_GUARD_MAX_INPUT_ENV: "1048576"}
    env, _ = preload_environment(0, {REQUEST_GUARD_MAX_INPUT_ENV: "0"}, library=cap, gzip_library=gzip,
                                 guard_library=guard, max_input_bytes=1 << 20)
    assert env[REQUEST_GUARD_MAX_INPUT_ENV] == "0"
    for typo in ("1MiB", "", " 4096", "-1", "４０９６"):  # the guard would keep its own 256 MiB for each
        env, warning = preload_environment(0, {REQUEST_GUARD_MAX_INPUT_ENV: typo}, library=cap, gzip_library=gzip,
                                           guard_library=guard, max_input_bytes=1 << 20)
        assert env[REQUEST_GUARD_MAX_INPUT_ENV] == "1048576", typo
        assert f"{REQUEST_GUARD_MAX_INPUT_ENV}={typo!r} is not a byte count" in warning and "= 1048576 instead" in warning
    guard.unlink()  # no guard preloaded: no limit for it either
    env, _ = preload_environment(0, {}, library=cap, gzip_library=gzip, guard_library=guard, max_input_bytes=1 << 20)
    assert REQUEST_GUARD_MAX_INPUT_ENV not in env
    pod = preload_variables(wanted_helpers(0, None), lambda h: PurePosixPath("/pod/lib") / h.library.name, None, 4096)
    assert pod == {"LD_PRELOAD": "/pod/lib/librequest_guard.so", REQUEST_GUARD_ENV: "on", REQUEST_GUARD_MAX_INPUT_ENV: "4096"}


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


def test_a_library_older_than_its_source_is_preloaded_with_a_warning(tmp_path):
    """A rebuild that failed (or found no compiler) leaves the previous library: serve says so."""
    cap, gzip, guard = libraries(tmp_path)
    os.utime(guard, (0, 0))
    env, warning = preload_environment(0, {}, library=cap, gzip_level=None, gzip_library=gzip, guard_library=guard)
    assert env["LD_PRELOAD"] == str(guard)
    assert warning and str(guard) in warning and "built from another request_guard.c" in warning and "make setup" in warning


def old_build_of_a_helper(tmp_path):
    """A helper with its own one-line source and a library file "previous build" dated 1970."""
    from dataclasses import replace

    source = tmp_path / "helper.c"
    source.write_text("int helper(void) { return 1; }\n")
    helper = replace(REQUEST_GUARD, source=source, library=tmp_path / "lib" / "libhelper.so")
    helper.library.parent.mkdir()
    helper.library.write_bytes(b"previous build")
    os.utime(helper.library, (0, 0))
    return helper


def test_staleness_is_the_source_digest_its_build_recorded_not_the_files_times(tmp_path):
    """A second checkout sharing the environment has newer files with the same bytes: not stale; a
    library whose recorded digest differs, or that was replaced since (an older checkout rebuilt it
    in place), is stale whatever its time; one built before digests were recorded is judged by time
    once, and `build_helper` records the digest when it finds it up to date."""
    from serving.runtime.native import build_helper, digest_file, file_digest, is_stale, record_build, source_digest

    helper = old_build_of_a_helper(tmp_path)
    source = helper.source
    assert is_stale(helper, helper.library)  # no digest: older than its source
    record_build(helper, helper.library)
    assert not is_stale(helper, helper.library)  # same bytes, however old
    source.write_text("int helper(void) { return 2; }\n")
    os.utime(source, (0, 0))
    assert is_stale(helper, helper.library)  # other bytes, however new the library
    record_build(helper, helper.library)
    helper.library.write_bytes(b"rebuilt in place by an older checkout, which records nothing")
    assert is_stale(helper, helper.library)  # the library is not the one the digest describes
    digest_file(helper.library).unlink()
    assert not is_stale(helper, helper.library)  # no digest, library newer than the source (by time)
    path, what = build_helper(helper, compiler="false")  # up to date by time: no compiler needed
    assert path == helper.library and "up to date" in what
    assert digest_file(helper.library).read_text().split() == [source_digest(helper), file_digest(helper.library)]


def test_a_failed_rebuild_leaves_the_previous_library_untouched_and_says_it_stays(tmp_path):
    from serving.runtime.native import build_helper, is_stale

    helper = old_build_of_a_helper(tmp_path)
    path, what = build_helper(helper, compiler="false")
    assert path is None and "stays preloaded" in what and is_stale(helper, helper.library)
    assert helper.library.read_bytes() == b"previous build" and sorted(p.name for p in helper.library.parent.iterdir()) == ["libhelper.so"]
