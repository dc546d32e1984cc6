"""Who may reconfigure a running server, and where it listens.

Triton's model-repository API (load/unload/index), shared-memory API (register host memory),
logging API (change log settings) and trace API (change trace settings) let a caller change what
the server does, so the launcher always restricts them with a key header
(`--http-restricted-api` / `--grpc-restricted-protocol`); inference, metadata, health and
statistics stay open. Over HTTP the caller sends `admin-key: <KEY>`; over gRPC Triton expects the
header name prefixed, `triton-grpc-protocol-admin-key: <KEY>`.

The key comes from the environment (`TRITON_ADMIN_KEY`) or from a key file outside the repository
(default `~/.config/triton-model-serving/admin-key`, mode 0600, created by
`python -m serving admin-key`). A key file inside the repository tree, or one readable by group or
others, is refused. When neither exists, the launcher locks the APIs with a one-off random key that
is kept nowhere, so they are never left open. Nothing here prints or logs a key; `AdminKey.__repr__`
hides it.

Triton takes the key only on its command line, which /proc/<pid>/cmdline shows to every local user;
`keep_key_off_command_line` puts a random decoy there instead, and the preloaded request guard
(serving/runtime/native/request_guard.c) puts the key back into Triton's arguments from the server's
environment (owner-only in /proc). Without that library (no C compiler at `make setup`) the key is
on the command line: mount /proc with hidepid=2, or run the server in its own container/user, on
shared hosts.
"""
from __future__ import annotations

import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from contracts.serving_spec import is_loopback_host
from contracts.errors import SecurityError

#: The key itself (highest precedence).
ADMIN_KEY_ENV = "TRITON_ADMIN_KEY"
#: Where the key file is, when not the default.
ADMIN_KEY_FILE_ENV = "TRITON_ADMIN_KEY_FILE"
DEFAULT_ADMIN_KEY_FILE = Path("~/.config/triton-model-serving/admin-key")
#: Header name Triton checks (HTTP); gRPC callers send it with GRPC_HEADER_PREFIX in front.
ADMIN_KEY_HEADER = "admin-key"
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"
#: Triton API groups that change server state. `trace` is included beside the three the operations
#: brief names: its settings API can redirect trace output too.
RESTRICTED_APIS = ("model-repository", "shared-memory", "logging", "trace")
#: URL-safe characters only: the key sits inside Triton's `<apis>:<header>=<key>` flag value, so it
#: must not contain ',', ':', '=' or whitespace. 24+ characters (secrets.token_urlsafe(32) gives 43).
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_-]{24,256}$")
from contracts.layout import PROJECT_ROOT


@dataclass(frozen=True)
class AdminKey:
    """The admin key and where it came from. The value never appears in repr, str or errors."""

    value: str = field(repr=False)
    #: Human-readable origin, safe to print: "environment variable TRITON_ADMIN_KEY", "file ...".
    source: str

    def __post_init__(self) -> None:
        if not isinstance(self.value, str) or not KEY_PATTERN.fullmatch(self.value):
            length = len(self.value) if isinstance(self.value, str) else "?"
            raise SecurityError(
                f"the admin key from {self.source} is not acceptable ({length} characters): expected 24 to "
                f"256 characters from A-Z a-z 0-9 _ - (create one with `python -m serving admin-key`)."
            )

    def http_headers(self) -> dict[str, str]:
        """Headers for tritonclient.http calls to restricted APIs (`headers=` argument)."""
        return {ADMIN_KEY_HEADER: self.value}

    def grpc_headers(self) -> dict[str, str]:
        """Headers for tritonclient.grpc calls to restricted APIs (Triton wants the prefix)."""
        return {GRPC_HEADER_PREFIX + ADMIN_KEY_HEADER: self.value}

    def headers(self, protocol: str) -> dict[str, str]:
        return self.grpc_headers() if str(getattr(protocol, "value", protocol)) == "grpc" else self.http_headers()


def restricted_api_flags(key: AdminKey, apis: tuple[str, ...] = RESTRICTED_APIS) -> dict[str, str]:
    """`ServerSettings.restricted` for this key: the same API groups locked on HTTP and gRPC."""
    unknown = set(apis) - set(RESTRICTED_APIS)
    if not apis or unknown:
        raise SecurityError(f"restricted APIs {sorted(unknown) or '[]'} are not allowed: choose from {RESTRICTED_APIS}.")
    value = f"{','.join(apis)}:{ADMIN_KEY_HEADER}={key.value}"
    return {"http_restricted_api": value, "grpc_restricted_protocol": value}


def redact_restricted_flags(args: list[str]) -> list[str]:
    """A tritonserver argument list safe to print: the key part of restricted flags masked."""
    masked = []
    for arg in args:
        if arg.startswith(("--http-restricted-api=", "--grpc-restricted-protocol=")) and "=" in arg.split(":", 1)[-1]:
            head, _, _ = arg.rpartition("=")
            arg = head + "=***"
        masked.append(arg)
    return masked


#: The variables the preloaded request guard reads to put the key back into tritonserver's arguments.
ARGV_DECOY_ENV, ARGV_SECRET_ENV = "SERVING_ARGV_DECOY", "SERVING_ARGV_SECRET"


def keep_key_off_command_line(command: list[str], restricted: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """`command` with the admin key of the `restricted` flags replaced by a random decoy, and the
    environment with which the preloaded request guard restores it before Triton parses its
    arguments; (command, {}) unchanged when the flags hold no key."""
    keys = {value.rpartition("=")[2] for value in restricted.values() if "=" in value.partition(":")[2]}
    if len(keys) != 1 or not KEY_PATTERN.fullmatch(next(iter(keys))):
        return list(command), {}
    key, decoy = keys.pop(), secrets.token_urlsafe(32)
    return [arg.replace(key, decoy) for arg in command], {ARGV_DECOY_ENV: decoy, ARGV_SECRET_ENV: key}


def _is_inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def resolve_key_file(key_file: str | os.PathLike | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The key file to use: explicit argument, else $TRITON_ADMIN_KEY_FILE, else the default."""
    environ = os.environ if environ is None else environ
    chosen = key_file or environ.get(ADMIN_KEY_FILE_ENV) or DEFAULT_ADMIN_KEY_FILE
    return Path(chosen).expanduser().resolve()


def check_key_file_location(path: Path, repo_root: Path = PROJECT_ROOT) -> None:
    """Refuse a key file inside the repository tree: it could be committed or copied with it."""
    if _is_inside(Path(path).resolve(), Path(repo_root).resolve()):
        raise SecurityError(
            f"admin key file {path} is inside the repository {repo_root}; keep it outside (default "
            f"{DEFAULT_ADMIN_KEY_FILE}) or set {ADMIN_KEY_ENV} instead."
        )


def check_key_file_permissions(path: Path) -> None:
    """Refuse a key file that is not a regular file owned by us with no group/other access."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise SecurityError(f"admin key file {path} is not a regular file.")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise SecurityError(
            f"admin key file {path} has mode {mode:04o}: group or others may read it; expected 0600 "
            f"(run `chmod 600 {path}`)."
        )
    if info.st_uid != os.geteuid():
        raise SecurityError(f"admin key file {path} belongs to uid {info.st_uid}, not to this user ({os.geteuid()}).")


def load_admin_key(
    environ: Mapping[str, str] | None = None,
    key_file: str | os.PathLike | None = None,
    repo_root: Path = PROJECT_ROOT,
) -> AdminKey | None:
    """The configured admin key: $TRITON_ADMIN_KEY, else the key file; None when neither exists."""
    environ = os.environ if environ is None else environ
    if environ.get(ADMIN_KEY_ENV):
        return AdminKey(environ[ADMIN_KEY_ENV].strip(), f"environment variable {ADMIN_KEY_ENV}")
    path = resolve_key_file(key_file, environ)
    check_key_file_location(path, repo_root)
    if not path.exists():
        if not key_file and environ.get(ADMIN_KEY_FILE_ENV):  # named on purpose: a typo there locked the
            # operator out in silence, every admin call a 403 (a review, 2026-12-07)
            raise SecurityError(f"admin key file {path} ({ADMIN_KEY_FILE_ENV}) does not exist; expected the key file to use: create "
                                f"it with `make admin-key` (which writes to {ADMIN_KEY_FILE_ENV} too), or unset "
                                f"{ADMIN_KEY_FILE_ENV} to serve with the admin APIs locked by a one-off key.")
        return None
    check_key_file_permissions(path)
    return AdminKey(path.read_text().strip(), f"file {path}")


def one_off_admin_key() -> AdminKey:
    """A random key that is stored nowhere: the admin APIs stay locked for everyone."""
    return AdminKey(secrets.token_urlsafe(32), "a one-off key held by no one (admin APIs locked)")


def create_admin_key_file(
    key_file: str | os.PathLike | None = None,
    environ: Mapping[str, str] | None = None,
    repo_root: Path = PROJECT_ROOT,
) -> tuple[Path, bool]:
    """Create the key file (mode 0600, parents 0700) if missing. Returns (path, created).

    An existing file is checked, not overwritten; to rotate, delete it and run this again (see
    docs/operations.md). The key is written only to the file, never printed.
    """
    path = resolve_key_file(key_file, environ)
    check_key_file_location(path, repo_root)
    if path.exists():
        check_key_file_permissions(path)
        AdminKey(path.read_text().strip(), f"file {path}")  # validates the content
        return path, False
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        # no trailing newline: `kubectl create secret --from-file` stores the bytes as they are, and a
        # newline would end up in Triton's admin-key flag, which no client header can match
        handle.write(secrets.token_urlsafe(32))
    return path, True


def check_bind_host(host: str, allow_non_loopback: bool) -> str | None:
    """Loopback is the default; any other address must be asked for explicitly.

    Returns None for loopback, a warning line to log for an allowed non-loopback address, and
    raises SecurityError for a non-loopback address that was not explicitly allowed.
    """
    if is_loopback_host(host):
        return None
    if not allow_non_loopback:
        raise SecurityError(
            f"refusing to bind to {host!r}: servers listen on loopback (127.0.0.1) unless told otherwise; "
            f"pass --allow-non-loopback to expose HTTP, gRPC and metrics on {host!r}."
        )
    return (
        f"WARNING: binding HTTP, gRPC and metrics to {host!r} (not loopback) as asked by --allow-non-loopback; "
        f"inference and metrics are reachable from the network, admin APIs need the key."
    )


_one_off_key: AdminKey | None = None
#: The configured key this process last loaded: kept for a partition restarted while the key file is
#: gone (a rotation's `rm`, then `make admin-key`), which otherwise got a one-off key in silence and
#: locked its admin APIs against the key every other partition still takes.
_configured_key: AdminKey | None = None


def launcher_admin_key(environ: Mapping[str, str] | None = None, key_file: str | os.PathLike | None = None) -> AdminKey:
    """The key the launcher locks every partition with: the configured one (or, once it is gone, the
    one this process loaded before, with a warning), else ONE one-off key per process (the same for
    every partition and every restart, so the launcher itself can still read the repository index;
    nobody else can use the admin APIs until a key is configured)."""
    global _one_off_key, _configured_key
    try:
        key = load_admin_key(environ, key_file)
    except SecurityError:
        if _configured_key is None or resolve_key_file(key_file, environ).exists():
            raise
        key = None  # the named file is gone after a start that loaded it (being rotated): the loaded key, below
    if key is not None:
        _configured_key = key
        return key
    if _configured_key is not None:
        import logging

        logging.getLogger("serving.runtime.supervisor").warning(
            "the admin key (%s) is gone: this server keeps the key loaded at start, as the others do; a new key "
            "takes effect at the next `make serve` (docs/operations.md, rotating the key)", _configured_key.source)
        return _configured_key
    if _one_off_key is None:
        _one_off_key = one_off_admin_key()
    return _one_off_key
