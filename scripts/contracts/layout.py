"""Where things live in a checkout: the one place that knows the folder layout.

Every package finds the project root, the model repository, the run state and the source
folders through these names instead of counting `parents[N]` from its own file (a count that
silently breaks whenever a module moves one level). The project is installed editable
(`make setup`), so this file sits at `<root>/scripts/contracts/layout.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The checkout's root (holds Makefile, model_repository/, build/, clients/, scripts/, deploy/).
PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: What is served: Triton model folders plus serving.toml.
MODEL_REPOSITORY = PROJECT_ROOT / "model_repository"
#: The serving plan every package reads (partitions, limits, placement).
SERVING_CONFIG = MODEL_REPOSITORY / "serving.toml"
#: Run-time state of `make serve`: manifest, supervisor state, logs.
RUN_DIR = PROJECT_ROOT / "run"
#: The manifest clients read to find the running endpoints.
MANIFEST = RUN_DIR / "manifest.json"
#: Build outputs too large for git (ONNX files, calibration sets, test splits).
ARTIFACTS_DIR = PROJECT_ROOT / "artifacts"
#: Reports written by builds and benchmarks.
REPORTS_DIR = PROJECT_ROOT / "reports"
#: Next to each TensorRT engine's version folder (artifacts/<model>/tensorrt/<model>_<precision>/):
#: its replay inputs, batches cut to the engine's profile, and the FP32 outputs for exactly those;
#: written by the GPU build, replayed by `make gpu-check` and the build report's polygraphy line.
ENGINE_REPLAY_INPUTS, ENGINE_REPLAY_OUTPUTS = "replay_inputs.json", "replay_outputs_fp32.json"
#: Polygraphy's element-wise tolerance of that replay (median abs error), as in the CPU validation.
ENGINE_REPLAY_ATOL = 0.01
#: Source folders that hold importable packages (the Triton Python stub needs them on its path).
SOURCE_DIRS = tuple(PROJECT_ROOT / name for name in ("build", "clients", "scripts", "deploy"))
class PathBelow:
    """A file or folder at a fixed place below a layout's root folder, declared once per name
    (`logs = PathBelow("run_dir", "logs")`): the layout's paths read as a table, not as a
    property each."""

    def __init__(self, root_field: str, *parts: str | Path):
        self.root_field, self.parts = root_field, parts

    def __get__(self, layout: Any, owner: type | None = None) -> Any:
        if layout is None:
            return self
        return Path(getattr(layout, self.root_field)).joinpath(*self.parts)


@dataclass(frozen=True)
class RunLayout:
    """Where one `make serve` keeps its runtime files (default: <project>/run)."""

    run_dir: Path

    logs = PathBelow("run_dir", "logs")
    #: Per-run copy of the backends folder (project backends beside Triton's own).
    backends = PathBelow("run_dir", "backends")
    manifest = PathBelow("run_dir", "manifest.json")
    supervisor_pid = PathBelow("run_dir", "supervisor.pid")
    supervisor_state = PathBelow("run_dir", "supervisor.json")
    supervisor_log = PathBelow("run_dir", "logs", "supervisor.log")
    #: Held (flock) by the one `serve` starting this run's supervisor (serving.runtime.supervisor_control).
    serve_lock = PathBelow("run_dir", "serve.lock")
    mps_pipe = PathBelow("run_dir", "mps", "pipe")
    mps_log = PathBelow("run_dir", "mps", "log")
    #: `operations.monitor start`'s folder: Prometheus's config, rules, data, log and state.json.
    prometheus = PathBelow("run_dir", "prometheus")

    def partition_log(self, partition: str) -> Path:
        return self.logs / f"tritonserver-{partition}.log"

    @property
    def stop_command(self) -> str:
        """How to stop what `serve` started here: `make stop` knows only the default run/ (advice to
        run it, given for another run folder, stopped the wrong deployment or nothing)."""
        import shlex

        if Path(self.run_dir).resolve() == RUN_DIR.resolve():
            return "`make stop`"
        return f"`python -m serving stop --run-dir {shlex.quote(str(self.run_dir))}`"

    @property
    def restart_command(self) -> str:
        """How to restart it: `make stop && make serve`, or this run folder's stop and its `serve` again."""
        if self.stop_command == "`make stop`":
            return "`make stop && make serve`"
        return f"{self.stop_command}, then `serve` it again as it was started"


def display_path(path: Path | str, root: Path | str = PROJECT_ROOT) -> str:
    """`path` relative to `root` when it lies below it (how reports and commands name files), else as given."""
    try:
        return str(Path(path).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return str(path)


def place_model_file(source: Path, target: Path) -> None:
    """Put `source` at `target` in a (throwaway) model repository: a hard link, so a large file is not
    copied (the backend refuses symbolic links that leave the model directory), or a copy where the
    two are on different file systems (a tmpfs /tmp: a hard link fails there with EXDEV)."""
    import os
    import shutil

    try:
        os.link(Path(source).resolve(), target)
    except OSError:
        shutil.copy2(source, target)


def write_text_atomically(path: Path, text: str) -> Path:
    """Write `text` to `path` through a temporary file renamed over it: a reader (or a later run,
    after this one was killed mid-write) sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


if not (PROJECT_ROOT / "Makefile").is_file():  # pragma: no cover - guards a moved file
    raise ImportError(f"contracts.layout expected the project root at {PROJECT_ROOT} (a folder with a Makefile); was the package moved?")
