"""The one native helper this project builds: the condition-wait cap preloaded into tritonserver.

`scripts/serving/runtime/native/cond_wait_cap.c` (why: its header and docs/triton-batcher-stall.md) is
compiled by `make setup` (`python -m serving build-native`) into the virtual environment, next to
nothing of the repository, and `preload_environment` is how a server process gets it. Without a C
compiler the build prints one line and serving works as before (with Triton 2.51's stalls).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).parent / "native" / "cond_wait_cap.c"
#: Where `make setup` puts the library: inside the environment that runs the servers.
LIBRARY = Path(sys.prefix) / "lib" / "triton-serving" / "libcond_wait_cap.so"
CAP_ENV = "SERVING_COND_WAIT_CAP_US"


def build_cond_wait_cap(dest: Path = LIBRARY, compiler: str | None = None) -> tuple[Path | None, str]:
    """Compile the library (only when the source is newer); (path or None, what happened)."""
    cc = compiler or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if dest.exists() and dest.stat().st_mtime >= SOURCE.stat().st_mtime:
        return dest, f"{dest} is up to date"
    if cc is None:
        return None, ("no C compiler (cc/gcc) on PATH: the condition-wait cap is not built, so Triton 2.51's lost "
                      "batcher wake-ups can hold requests for up to 500 ms (docs/triton-batcher-stall.md)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-Wall", "-o", str(dest), str(SOURCE), "-ldl"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return None, f"{cc} failed to build {SOURCE.name} ({done.returncode}): {done.stderr.strip()[:400]}"
    return dest, f"built {dest}"


def preload_environment(cap_us: int, base: dict[str, str], library: Path = LIBRARY) -> tuple[dict[str, str], str | None]:
    """`base` plus LD_PRELOAD of the library and its cap, when `cap_us` > 0 and it is built;
    (environment, a one-line warning or None)."""
    if cap_us <= 0:
        return base, None
    if not library.exists():
        return base, (f"{library} is missing (run `make setup`, which needs a C compiler): Triton 2.51's lost "
                      f"batcher wake-ups can hold requests for up to 500 ms")
    env = dict(base)
    env["LD_PRELOAD"] = ":".join([str(library)] + ([env["LD_PRELOAD"]] if env.get("LD_PRELOAD") else []))
    env[CAP_ENV] = str(cap_us)
    return env, None
