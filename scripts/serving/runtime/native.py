"""The native helpers this project builds and preloads into tritonserver (and nothing else).

- `cond_wait_cap.c`: caps Triton 2.51's long condition-variable waits, so a lost batcher wake-up
  costs milliseconds instead of 500 ms (its header; docs/triton-batcher-stall.md).
- `gzip_level.c`: sets the zlib level of the HTTP responses Triton compresses for clients that
  send `Accept-Encoding: gzip` (its header; docs/performance.md, "Compressed responses").

Both are compiled by `make setup` (`python -m serving build-native`) into the virtual environment,
next to nothing of the repository, and `preload_environment` is how a server process gets them;
each is inert outside `tritonserver` and unless its environment variable is set. Without a C
compiler the build prints one line per helper and serving works as before (with Triton 2.51's
stalls, and level-6 compression).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

NATIVE_DIR = Path(__file__).parent / "native"
#: Where `make setup` puts the libraries: inside the environment that runs the servers.
LIBRARY_DIR = Path(sys.prefix) / "lib" / "triton-serving"
CAP_ENV = "SERVING_COND_WAIT_CAP_US"
GZIP_LEVEL_ENV = "SERVING_HTTP_GZIP_LEVEL"


@dataclass(frozen=True)
class NativeHelper:
    """One preloadable library: its source, where it is built, and what goes missing without it."""

    name: str
    source: Path
    library: Path
    #: Said when the helper cannot be built or is missing.
    without_it: str


COND_WAIT_CAP = NativeHelper(
    "condition-wait cap", NATIVE_DIR / "cond_wait_cap.c", LIBRARY_DIR / "libcond_wait_cap.so",
    "Triton 2.51's lost batcher wake-ups can hold requests for up to 500 ms (docs/triton-batcher-stall.md)")
GZIP_LEVEL = NativeHelper(
    "HTTP gzip level", NATIVE_DIR / "gzip_level.c", LIBRARY_DIR / "libgzip_level.so",
    "Triton compresses HTTP responses at zlib's level 6 for clients that accept gzip (docs/performance.md)")
HELPERS = (COND_WAIT_CAP, GZIP_LEVEL)


def build_helper(helper: NativeHelper, dest: Path | None = None, compiler: str | None = None) -> tuple[Path | None, str]:
    """Compile one helper (only when the source is newer); (path or None, what happened)."""
    dest = dest or helper.library
    cc = compiler or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    inputs = [helper.source, *helper.source.parent.glob("*.h")]  # the helpers share a header
    if dest.exists() and dest.stat().st_mtime >= max(p.stat().st_mtime for p in inputs):
        return dest, f"{dest} is up to date"
    if cc is None:
        return None, f"no C compiler (cc/gcc) on PATH: the {helper.name} is not built, so {helper.without_it}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-Wall", "-o", str(dest), str(helper.source), "-ldl"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return None, f"{cc} failed to build {helper.source.name} ({done.returncode}): {done.stderr.strip()[:400]}"
    return dest, f"built {dest}"


def preload_environment(cap_us: int, base: dict[str, str], library: Path = COND_WAIT_CAP.library,
                        gzip_level: int | None = None, gzip_library: Path = GZIP_LEVEL.library
                        ) -> tuple[dict[str, str], str | None]:
    """`base` plus LD_PRELOAD of the helpers that are asked for and built, and their variables:
    the cap when `cap_us` > 0, the gzip level when `gzip_level` is not None. (environment, one line
    of warnings or None)."""
    env, preload, warnings = dict(base), [], []
    for wanted, path, helper, variable, value in (
            (cap_us > 0, library, COND_WAIT_CAP, CAP_ENV, cap_us),
            (gzip_level is not None, gzip_library, GZIP_LEVEL, GZIP_LEVEL_ENV, gzip_level)):
        if not wanted:
            continue
        if not path.exists():
            warnings.append(f"{path} is missing (run `make setup`, which needs a C compiler): {helper.without_it}")
            continue
        preload.append(str(path))
        env[variable] = str(value)
    if preload:
        env["LD_PRELOAD"] = ":".join(preload + ([env["LD_PRELOAD"]] if env.get("LD_PRELOAD") else []))
    return env, "; ".join(warnings) or None
