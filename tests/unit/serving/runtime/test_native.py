"""The preloaded helpers' environment (serving.runtime.native): which libraries a server gets and
which variables tell them what to do. Pure; the libraries' effect on a real tritonserver is
tests/integration/test_http_compression.py."""
from __future__ import annotations

from serving.runtime.native import CAP_ENV, GZIP_LEVEL_ENV, preload_environment


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


def test_a_missing_library_is_named_in_the_warning_and_the_other_still_preloaded(tmp_path):
    cap, gzip = libraries(tmp_path)
    gzip.unlink()
    env, warning = preload_environment(2000, {}, library=cap, gzip_level=1, gzip_library=gzip)
    assert env["LD_PRELOAD"] == str(cap) and GZIP_LEVEL_ENV not in env
    assert str(gzip) in warning and "make setup" in warning and "level 6" in warning
