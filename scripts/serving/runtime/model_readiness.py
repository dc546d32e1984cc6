"""Which of the models a server was asked to load are ready, and why the others are not.

The launcher runs tritonserver with `--exit-on-error=false` (see ServerSettings): a model whose file
is missing or corrupt fails alone and the others are served. The server's own readiness then says
nothing about that model, so after start-up the launcher asks each model's readiness (an open API)
and explains every failure with Triton's reason: from the repository index when it holds the admin
key (a restricted API), else from the server log's `failed to load '<model>' version N: <reason>`.
"""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from contracts.errors import ServingError
from contracts.processes import HTTP_PROTOCOL_ERRORS

if TYPE_CHECKING:  # a parameter type only: the pods' liveness probe imports this module under the
    # image's Python 3.10, and serving.runtime.security reaches contracts.serving_spec (tomllib, 3.11)
    from serving.runtime.security import AdminKey

#: Triton's reason text carries the Python traceback after "At:"; the first part is the news.
_TRACEBACK = re.compile(r"(\n|\\n)\s*(\n|\\n)At:")
#: A load failure as tritonserver logs it (model_lifecycle.cc), one line with escaped newlines.
_LOG_FAILURE = re.compile(r"""failed to load '(?P<name>[^']+)' version (?P<version>\S+): (?P<reason>.*?)"?$""")
MAX_REASON_CHARS = 400


@dataclass(frozen=True)
class ModelLoadState:
    """One row of Triton's repository index."""

    name: str
    version: str
    state: str
    reason: str = ""

    @property
    def ready(self) -> bool:
        return self.state == "READY"


def short_reason(reason: str) -> str:
    """Triton's load-failure reason without the traceback, on one line, bounded in length."""
    head = _TRACEBACK.split(reason, 1)[0]
    line = " ".join(head.replace("\\n", " ").split())
    return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 3] + "..."


def parse_repository_index(payload: Any) -> tuple[ModelLoadState, ...]:
    """Parse the JSON answer of POST /v2/repository/index (a list of name/version/state/reason)."""
    if not isinstance(payload, list):
        raise ServingError(f"repository index: expected a JSON list, got {type(payload).__name__}.")
    return tuple(
        ModelLoadState(str(row.get("name", "")), str(row.get("version", "")), str(row.get("state", "")), str(row.get("reason", "")))
        for row in payload
    )


def failed_models(states: Iterable[ModelLoadState], expected: Sequence[str]) -> dict[str, str]:
    """{model: reason} for every expected model that has no READY version."""
    by_name: dict[str, list[ModelLoadState]] = {}
    for state in states:
        by_name.setdefault(state.name, []).append(state)
    failed = {}
    for name in expected:
        rows = by_name.get(name)
        if not rows:
            failed[name] = "not in the model repository the server was started with"
        elif not any(r.ready for r in rows):
            failed[name] = "; ".join(
                f"version {r.version or '?'} {r.state or 'UNKNOWN'}: {short_reason(r.reason) or 'no reason given'}" for r in rows
            )
    return failed


def load_failures_from_log(log_text: str) -> dict[str, str]:
    """{model: reason} from tritonserver log lines `failed to load '<model>' version N: <reason>` (last wins)."""
    found = {}
    for line in log_text.splitlines():
        match = _LOG_FAILURE.search(line)
        if match:
            found[match["name"]] = f"version {match['version']}: {short_reason(match['reason'])}"
    return found


def fetch_repository_index(host: str, http_port: int, key: AdminKey, timeout_s: float = 10.0) -> tuple[ModelLoadState, ...]:
    """POST /v2/repository/index with the admin key (the API is restricted)."""
    request = urllib.request.Request(
        f"http://{host}:{http_port}/v2/repository/index", data=b"{}", method="POST",
        headers={"Content-Type": "application/json", **key.http_headers()},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return parse_repository_index(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")[:200]
        raise ServingError(f"repository index at {host}:{http_port} answered HTTP {exc.code}: {body}") from None
    except (urllib.error.URLError, OSError, json.JSONDecodeError, *HTTP_PROTOCOL_ERRORS) as exc:
        raise ServingError(f"repository index at {host}:{http_port} could not be read: {exc!r}") from None


def served_model_config(host: str, http_port: int, model: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """GET /v2/models/<model>/config (open to everyone): the config Triton is serving, as JSON.
    Raises urllib.error.URLError/OSError (server unreachable, model unknown, or an answer that is not
    HTTP) or ValueError (not JSON)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{http_port}/v2/models/{model}/config", timeout=timeout_s) as response:
            return json.loads(response.read())
    except HTTP_PROTOCOL_ERRORS as exc:
        raise OSError(f"no HTTP answer from {host}:{http_port} ({exc!r})") from None


def model_readiness(host: str, http_port: int, model: str, timeout_s: float = 5.0) -> bool | None:
    """GET /v2/models/<model>/ready (open to everyone): True when ready, False when Triton answered
    that it is not, None when Triton could not be asked (unreachable, or no answer in `timeout_s`:
    a busy server is not an unloaded model)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{http_port}/v2/models/{model}/ready", timeout=timeout_s) as response:
            return response.status == 200
    except urllib.error.HTTPError:
        return False
    except (urllib.error.URLError, OSError, *HTTP_PROTOCOL_ERRORS):
        return None


def model_ready(host: str, http_port: int, model: str, timeout_s: float = 5.0) -> bool:
    """`model_readiness` is True: ready, and Triton said so."""
    return model_readiness(host, http_port, model, timeout_s) is True


def check_models_loaded(host: str, http_port: int, expected: Sequence[str], key: AdminKey | None = None,
                        log_path: str | Path | None = None) -> dict[str, str]:
    """{model: reason} for each of `expected` that the server at host:http_port does not serve.

    Readiness comes from the open per-model endpoint; the reason from the repository index when
    `key` is given, else from the server log at `log_path`.
    """
    unready = [m for m in expected if not model_ready(host, http_port, m)]
    if not unready:
        return {}
    reasons: dict[str, str] = {}
    if key is not None:
        reasons = failed_models(fetch_repository_index(host, http_port, key), unready)
    elif log_path is not None:
        try:
            reasons = load_failures_from_log(Path(log_path).read_text(errors="replace"))
        except FileNotFoundError:
            reasons = {}
    return {m: reasons.get(m, f"not ready (no reason found; see {log_path or 'the server log'})") for m in unready}
