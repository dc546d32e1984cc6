"""The native helpers this project builds and preloads into tritonserver (and nothing else).

- `cond_wait_cap.c`: caps Triton 2.51's long condition-variable waits, so a lost batcher wake-up
  costs milliseconds instead of 500 ms (its header; docs/triton-batcher-stall.md).
- `gzip_level.c`: sets the zlib level of the HTTP responses Triton compresses for clients that
  send `Accept-Encoding: gzip` (its header; docs/performance.md, "Compressed responses").
- `request_guard.c`: refuses, per request and before batching, the malformed requests that get past
  Triton 2.51's own checks and then fail a whole batch, a backend stub or the server (a BYTES element
  longer than the data, a shape whose size overflows, inputs, inflated bodies, parameters and JSON
  nesting past their limits, the classification extension on a BYTES output), and gives 400 with the
  expected form where Triton answered 500 or unclearly; always on (its header lists each;
  docs/operations.md, "Bad input").

All are compiled by `make setup` (`python -m serving build-native`) into the virtual environment,
next to nothing of the repository, and `preload_environment` is how a server process gets them;
a Kubernetes pod gets the same variables from `preload_variables`, with the libraries that the
model-repository image builds (`python -m serving.runtime.native DIR`, deploy/image/Dockerfile);
each is inert outside `tritonserver` and unless its environment variable is set. Without a C
compiler the build prints one line per helper and serving works as before (with Triton 2.51's
stalls, and level-6 compression).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Callable, Mapping

NATIVE_DIR = Path(__file__).parent / "native"
#: Where `make setup` puts the libraries: inside the environment that runs the servers.
LIBRARY_DIR = Path(sys.prefix) / "lib" / "triton-serving"
CAP_ENV = "SERVING_COND_WAIT_CAP_US"
GZIP_LEVEL_ENV = "SERVING_HTTP_GZIP_LEVEL"
REQUEST_GUARD_ENV = "SERVING_REQUEST_GUARD"
#: The request guard's per-input limit in bytes (`[server] max_input_bytes`; 0 = none; unset: 256 MiB).
REQUEST_GUARD_MAX_INPUT_ENV = "SERVING_REQUEST_GUARD_MAX_INPUT_BYTES"


@dataclass(frozen=True)
class NativeHelper:
    """One preloadable library: its source, where it is built, the variable that switches it on,
    and what goes missing without it."""

    name: str
    source: Path
    library: Path
    #: The environment variable that gives the helper its setting (unset: the helper is inert).
    variable: str
    #: Said when the helper cannot be built or is missing.
    without_it: str


COND_WAIT_CAP = NativeHelper(
    "condition-wait cap", NATIVE_DIR / "cond_wait_cap.c", LIBRARY_DIR / "libcond_wait_cap.so", CAP_ENV,
    "Triton 2.51's lost batcher wake-ups can hold requests for up to 500 ms (docs/triton-batcher-stall.md)")
GZIP_LEVEL = NativeHelper(
    "HTTP gzip level", NATIVE_DIR / "gzip_level.c", LIBRARY_DIR / "libgzip_level.so", GZIP_LEVEL_ENV,
    "Triton compresses HTTP responses at zlib's level 6 for clients that accept gzip (docs/performance.md)")
REQUEST_GUARD = NativeHelper(
    "request guard", NATIVE_DIR / "request_guard.c", LIBRARY_DIR / "librequest_guard.so", REQUEST_GUARD_ENV,
    "a BYTES element longer than its request's data fails every request batched with it, and a shape whose size "
    "overflows stops the model's backend stub (docs/operations.md)")
HELPERS = (COND_WAIT_CAP, GZIP_LEVEL, REQUEST_GUARD)


def _inputs(helper: NativeHelper) -> list[Path]:
    return [helper.source, *helper.source.parent.glob("*.h")]  # the helpers share a header


def source_digest(helper: NativeHelper) -> str:
    """sha256 of the helper's source and the header the helpers share (names and bytes)."""
    digest = hashlib.sha256()
    for path in sorted(_inputs(helper)):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def digest_file(library: Path) -> Path:
    """Where a build records what it compiled, beside the library: `<source_digest> <library sha256>`."""
    return library.with_name(library.name + ".source-sha256")


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_build(helper: NativeHelper, library: Path, sources: str | None = None) -> None:
    """Write `library`'s digest file: the sources it was built from (`sources`, else the helper's
    sources now) and the library's own sha256, so a library another checkout's older code rebuilt
    in place (without recording) is not taken for this build."""
    partial = library.with_name(f".{digest_file(library).name}.{os.getpid()}.tmp")
    partial.write_text(f"{sources or source_digest(helper)} {file_digest(library)}\n")
    os.replace(partial, digest_file(library))


def is_stale(helper: NativeHelper, library: Path) -> bool:
    """Whether `library` was built from other sources than the helper's here: the digest its build
    recorded beside it, compared with these sources' (so a second checkout sharing the environment
    does not look stale because its files are newer), as long as the library is the one that build
    wrote (a library replaced since is stale); a library without a recorded digest, by the files'
    times. False where the sources are not here (e.g. a pod) or the library is missing."""
    try:
        if not library.exists():
            return False
        if digest_file(library).exists():
            recorded = digest_file(library).read_text().split()
            if len(recorded) != 2 or recorded[1] != file_digest(library):
                return True
            return recorded[0] != source_digest(helper)
        return library.stat().st_mtime < max(p.stat().st_mtime for p in _inputs(helper))
    except (OSError, ValueError):
        return False


def restores_argv_secret(library: Path) -> bool:
    """Whether `library` (a built request guard) puts the admin key back into tritonserver's arguments
    (serving.runtime.security.keep_key_off_command_line). A library built before that code, kept when a
    rebuild fails or `make setup` was not rerun, would leave Triton locked with the decoy: the key then
    stays on the command line, as without the library."""
    try:
        return b"SERVING_ARGV_SECRET" in Path(library).read_bytes()
    except OSError:
        return False


def build_helper(helper: NativeHelper, dest: Path | None = None, compiler: str | None = None) -> tuple[Path | None, str]:
    """Compile one helper (only when the source is newer); (path or None, what happened). The library
    is replaced only by a complete build: an interrupted one never leaves a half-written file that
    would look up to date."""
    dest = dest or helper.library
    cc = compiler or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if dest.exists() and not is_stale(helper, dest):
        if not digest_file(dest).exists():  # built before digests were recorded, newer than its sources
            with contextlib.suppress(OSError):
                record_build(helper, dest)
        return dest, f"{dest} is up to date"
    kept = f"; the older {dest} stays preloaded until a build succeeds" if dest.exists() else ""
    if cc is None:
        return None, f"no C compiler (cc/gcc) on PATH: the {helper.name} is not built, so {helper.without_it}{kept}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    digest = source_digest(helper)  # before compiling: an edit during the build leaves the library stale
    done = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-Wall", "-o", str(partial), str(helper.source), "-ldl"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        return None, f"{cc} failed to build {helper.source.name} ({done.returncode}): {done.stderr.strip()[:400]}{kept}"
    digest_file(dest).unlink(missing_ok=True)  # never a new library beside an old digest
    os.replace(partial, dest)
    record_build(helper, dest, digest)
    return dest, f"built {dest}"


def build_helpers(directory: Path | None = None) -> list[tuple[NativeHelper, Path | None, str]]:
    """Build every helper, into `directory` or else each one's place in the environment:
    (helper, path or None, what happened) for each."""
    return [(helper, *build_helper(helper, directory / helper.library.name if directory else None)) for helper in HELPERS]


def wanted_helpers(cap_us: int, gzip_level: int | str | None) -> dict[NativeHelper, int | str]:
    """The helpers a server with these settings preloads, each with its variable's value: the cap
    when `cap_us` > 0, the gzip level ("off" or 0-9) when `gzip_level` is not None, and the request
    guard always (it only refuses requests that would otherwise fail others)."""
    return {helper: value for helper, wanted, value in ((COND_WAIT_CAP, cap_us > 0, cap_us),
                                                        (GZIP_LEVEL, gzip_level is not None, gzip_level),
                                                        (REQUEST_GUARD, True, "on"))
            if wanted}


def preload_variables(wanted: Mapping[NativeHelper, int | str], library_of: Callable[[NativeHelper], PurePath],
                      inherited_preload: str | None = None, max_input_bytes: int | None = None) -> dict[str, str]:
    """LD_PRELOAD (the helpers first, then what was preloaded already), each helper's variable, and
    the request guard's per-input limit when it is preloaded and `max_input_bytes` is given.

    Pure, so a host server (libraries in the environment) and a Kubernetes pod (libraries the image
    built, rendered by deploy/k8s_deploy) get their variables from the same code."""
    if not wanted:
        return {}
    preload = [str(library_of(helper)) for helper in wanted] + ([inherited_preload] if inherited_preload else [])
    variables = {"LD_PRELOAD": ":".join(preload), **{helper.variable: str(value) for helper, value in wanted.items()}}
    if REQUEST_GUARD in wanted and max_input_bytes is not None:
        variables[REQUEST_GUARD_MAX_INPUT_ENV] = str(max_input_bytes)
    return variables


def preload_environment(cap_us: int, base: dict[str, str], library: Path = COND_WAIT_CAP.library,
                        gzip_level: int | str | None = None, gzip_library: Path = GZIP_LEVEL.library,
                        guard_library: Path = REQUEST_GUARD.library,
                        max_input_bytes: int | None = None) -> tuple[dict[str, str], str | None]:
    """`base` plus `preload_variables` for the helpers that are asked for and built here; a per-input
    limit that `base` sets already is kept when it is a byte count (an operator's, or a test's 0 that
    turns it off), and replaced by `max_input_bytes`, with a warning, when it is not.
    (environment, one line of warnings or None)."""
    libraries = {COND_WAIT_CAP: library, GZIP_LEVEL: gzip_library, REQUEST_GUARD: guard_library}
    wanted, warnings = wanted_helpers(cap_us, gzip_level), []
    for helper in list(wanted):
        if not libraries[helper].exists():
            warnings.append(f"{libraries[helper]} is missing (run `make setup`, which needs a C compiler): "
                            f"{helper.without_it}")
            del wanted[helper]
        elif is_stale(helper, libraries[helper]):
            warnings.append(f"{libraries[helper]} was built from another {helper.source.name} (run `make setup`): the "
                            f"server preloads the {helper.name} as it was built, without the changes since")
    env = dict(base)
    limit, own = max_input_bytes, base.get(REQUEST_GUARD_MAX_INPUT_ENV)
    if own is not None and own.isascii() and own.isdigit():
        limit = None  # the operator's value, kept
    elif own is not None and max_input_bytes is not None:
        # the guard would keep its built-in 256 MiB for it (and an empty value in silence)
        warnings.append(f"{REQUEST_GUARD_MAX_INPUT_ENV}={own!r} is not a byte count (decimal digits; 0 = no limit): "
                        f"the request guard gets serving.toml's [server] max_input_bytes = {max_input_bytes} instead")
    env.update(preload_variables(wanted, libraries.__getitem__, base.get("LD_PRELOAD"), limit))
    return env, "; ".join(warnings) or None


def main(argv: list[str] | None = None) -> int:
    """`python -m serving.runtime.native DIR`: build every helper into DIR (the Kubernetes image's
    build stage; needs only the standard library and a C compiler). Exits 1 if one is not built."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m serving.runtime.native DIR (where to put the libraries)", file=sys.stderr)
        return 2
    built = build_helpers(Path(args[0]))
    for helper, path, what in built:
        print(f"[native] {helper.name}: {what}", file=sys.stdout if path else sys.stderr)
    return 1 if any(path is None for _, path, _ in built) else 0


if __name__ == "__main__":
    sys.exit(main())
