"""Run `python -m serving serve|status|stop` (the real supervisor) on free loopback ports, for tests.

Shared by test_faults, test_isolation and test_crash_loop: one way to write the test's
serving.toml, start the supervisor, read what it records, and stop it."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Sequence

from contracts.layout import RunLayout
from contracts.supervisor_state import SupervisorState, read_supervisor_state


def write_serving_config(path: Path, models: Sequence[str], recipe: str = "digit_cnn") -> Path:
    """A one-partition serving.toml naming `models` (their configs are already in the repository)."""
    lines = ["[priorities.batch]", "level = 1", "max_queue_size = 64", "default_timeout_microseconds = 2000000",
             "[batching]", 'default_priority = "batch"']
    for model in models:
        lines += [f"[models.{model}]", f'recipe = "{recipe}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def serving_cli(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "serving", *args], capture_output=True, text=True, timeout=timeout_s)


@contextlib.contextmanager
def supervised_server(workdir: Path, models: Sequence[str], repository: Path | None = None,
                      supervise_args: Sequence[str] = ()) -> Iterator[dict]:
    """`serving serve` for `models` on free ports; yields the endpoints, run dir and manifest path.

    `supervise_args` are passed on to the supervisor (e.g. `--max-restarts 2`): `serve` forwards
    only the server overrides, so they go in through `--supervise-arg`."""
    from conftest import REPOSITORY, free_ports

    config = write_serving_config(Path(workdir) / "serving.toml", models)
    http, grpc, metrics, supervisor = free_ports(4)
    layout = RunLayout(Path(workdir) / "run")
    common = ["--run-dir", str(layout.run_dir)]
    extra = [f"--supervise-arg={a}" for a in supervise_args]
    served = serving_cli("serve", "--config", str(config), "--repository", str(repository or REPOSITORY),
                         "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
                         "--supervisor-metrics-port", str(supervisor), "--timeout", "120", *extra, *common)
    try:
        assert served.returncode == 0, served.stdout + served.stderr
        yield {"http": f"127.0.0.1:{http}", "grpc": f"127.0.0.1:{grpc}", "metrics": f"http://127.0.0.1:{metrics}/metrics",
               "supervisor_metrics": f"http://127.0.0.1:{supervisor}/metrics",
               "manifest": layout.manifest, "state": layout.supervisor_state,
               "common": common}
    finally:
        serving_cli("stop", *common)


def supervisor_state(server: dict) -> SupervisorState:
    """run/supervisor.json through its one typed reader (the file exists once `serve` has returned)."""
    state = read_supervisor_state(Path(server["state"]))
    assert state is not None, f"no supervisor state at {server['state']}"
    return state


def partition_pid(manifest: Path, partition: str = "default") -> int:
    return int(json.loads(Path(manifest).read_text())["partitions"][partition]["pid"])
