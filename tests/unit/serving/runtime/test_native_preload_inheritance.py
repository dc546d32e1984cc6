"""The preloaded helpers (serving/runtime/native/) act only in tritonserver, and tritonserver takes them
out of LD_PRELOAD, so the processes it starts (the Python backend stubs) do not load them: through the
gzip helper, a stub's Python zlib (loaded privately, out of RTLD_NEXT's reach) failed every deflateInit
with Z_VERSION_ERROR. Compiled here and preloaded into small programs; the helpers' effects on a real
tritonserver are tests/integration (test_http_compression, test_isolation, the batcher-stall tests)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from serving.runtime.native import HELPERS, build_helper

pytestmark = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler on PATH")

#: prints what its children would inherit, then runs one: a Python that compresses with zlib
SHOW_AND_SPAWN = textwrap.dedent("""
    #include <stdio.h>
    #include <stdlib.h>
    int main(int argc, char **argv) {
        const char *preload = getenv("LD_PRELOAD");
        printf("%s\\n", preload ? preload : "<unset>");
        fflush(stdout);
        return argc > 1 ? system(argv[1]) : 0;
    }
""")
CHILD = f"{sys.executable} -c 'import zlib; print(len(zlib.compress(bytes(300), 6)))'"


@pytest.fixture(scope="module")
def helpers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("helpers")
    built = []
    for helper in HELPERS:
        library, what = build_helper(helper, folder / helper.library.name)
        assert library, what
        built.append(str(library))
    (folder / "show.c").write_text(SHOW_AND_SPAWN)
    for name in ("tritonserver", "other_program"):
        subprocess.run([shutil.which("cc") or "gcc", "-o", str(folder / name), str(folder / "show.c")], check=True)
    return folder, built


def run(program, preload: str):
    env = {**os.environ, "LD_PRELOAD": preload, "SERVING_HTTP_GZIP_LEVEL": "off", "SERVING_REQUEST_GUARD": "on",
           "SERVING_COND_WAIT_CAP_US": "2000"}
    done = subprocess.run([str(program), CHILD], capture_output=True, text=True, env=env, timeout=60)
    return done.returncode, done.stdout.splitlines(), done.stderr


def test_tritonserver_keeps_the_helpers_from_its_children_and_every_other_preload(helpers):
    folder, built = helpers
    returncode, (inherited, compressed), stderr = run(folder / "tritonserver", ":".join([*built, "libm.so.6"]))
    assert inherited == "libm.so.6"  # the helpers are gone, someone else's preload is kept
    assert returncode == 0 and int(compressed) > 0, stderr  # the child's zlib compresses
    returncode, (inherited, _), _ = run(folder / "tritonserver", ":".join(built))
    assert inherited == "<unset>" and returncode == 0


def test_any_other_program_keeps_its_environment_as_it_was(helpers):
    folder, built = helpers
    _, (inherited, *_), _ = run(folder / "other_program", ":".join(built))
    assert inherited == ":".join(built)
