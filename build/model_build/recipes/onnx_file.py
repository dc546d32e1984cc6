"""Recipe `onnx_file`: serve an ONNX file you bring, the way the project's own models are served.

    [models.my_model]
    recipe = "onnx_file"
    partition = "main"
    instance_count = 2
    max_batch_size = 32                       # a cap: `make build-engines` sizes it from measured memory
    options = { path = "models/my_model.onnx" }   # absolute, or relative to the checkout

The model then gets what every served model gets: the dynamic batcher with the priority levels and
queue policies of serving.toml, its partition's cores, warmup, the backend's per-request input
checks and failure isolation, metrics, and a config rendered with Triton's schema (docs/operations.md,
"Serving your own ONNX model"). Nothing is trained, quantized or downloaded: the file is served as
given (variant "fp32"; an INT8 variant needs calibration data and an accuracy budget that only a
recipe knowing the model has).

What the build checks, so that a file the backend cannot serve fails here with a message instead of
at load time or, worse, answering wrongly under load:
- onnx.checker passes, and ONNX Runtime opens the graph;
- every input and output has a dynamic first (batch) axis and fixed dims after it (the backend
  concatenates requests along the batch axis; it reads a variable axis as a token sequence, padded
  with its mask, and the memory sizing, warm-up samples and request byte bound need a length);
- batching does not change answers: synthetic rows run alone and as one batch agree within
  `batch_tolerance` (a graph whose rows interact, e.g. a batch-norm exported in training mode,
  would answer a request differently depending on its batch mates);
- the answers are finite.

The file's SHA-256 is part of the build fingerprint (`onnx_file_inputs`): a changed file rebuilds.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from contracts.file_digest import sha256_file
from contracts.layout import PROJECT_ROOT
from contracts.errors import ConfigError
from contracts.model_config import tensor_specs_from_onnx
from contracts.serving_spec import ModelSpec, Variant
from model_build.errors import BuildError
from model_build.onnx_export.export import check_onnx, onnxruntime_session
from model_build.sizing.memory_probe import synthetic_feeds

SERVED_ONNX = "fp32.onnx"
#: Rows of synthetic input run alone and as one batch (`batching_error`).
CHECK_ROWS = 4
#: Largest |difference| between a row run alone and inside a batch, by default: float32 rounding of
#: kernels that pick other blocking for other batch sizes stays far below it.
DEFAULT_BATCH_TOLERANCE = 1e-4
ONNX_FILE_OPTIONS = ("path", "batch_tolerance", "seed")


def source_path(model: ModelSpec) -> Path:
    """The file `options.path` names: absolute, or relative to the checkout (where `make` runs)."""
    path = model.options.get("path")
    if not isinstance(path, str) or not path.strip():
        raise BuildError(f"`models.{model.name}.options.path` = {path!r}: expected the path of an ONNX file "
                         f"(absolute, or relative to {PROJECT_ROOT}).")
    path = Path(path).expanduser()
    return path if path.is_absolute() else PROJECT_ROOT / path


def check_onnx_file_options(model: ModelSpec) -> None:
    """Before anything is built: unknown keys, a missing file, a variant this recipe cannot make."""
    unknown = set(model.options) - set(ONNX_FILE_OPTIONS)
    if unknown:
        raise BuildError(f"`models.{model.name}.options` has unknown keys {sorted(unknown)}; allowed: "
                         f"{list(ONNX_FILE_OPTIONS)}.")
    path = source_path(model)
    if not path.is_file():
        raise BuildError(f"`models.{model.name}.options.path`: {path} is not a file; expected an ONNX file.")
    if model.variant is not Variant.FP32:
        raise BuildError(f"`models.{model.name}.variant` = \"{model.variant.value}\": recipe onnx_file serves the file "
                         f"as given; expected \"fp32\" (an INT8 variant needs the calibration data and accuracy "
                         f"budget of a recipe that knows the model).")
    tolerance = model.options.get("batch_tolerance", DEFAULT_BATCH_TOLERANCE)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance > 0:
        raise BuildError(f"`models.{model.name}.options.batch_tolerance` = {tolerance!r}: expected a number > 0.")
    seed = model.options.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise BuildError(f"`models.{model.name}.options.seed` = {seed!r}: expected an integer >= 0.")


def onnx_file_inputs(model: ModelSpec) -> dict[str, Any]:
    """Fingerprinted with the options: the file's content, so a new file under the same name rebuilds."""
    path = source_path(model)
    return {"source_sha256": sha256_file(path) if path.is_file() else None}


def servable_specs(model_name: str, onnx_path: Path):
    """(inputs, outputs) as the config declares them, or BuildError saying what the backend needs."""
    try:
        inputs, outputs = tensor_specs_from_onnx(onnx_path)
    except ConfigError as exc:
        raise BuildError(f"{model_name}: {exc} The onnxruntime_cpu backend concatenates requests along the first "
                         f"axis; export the graph with a dynamic batch axis.") from None
    variable = {t.name: [-1, *t.dims] for t in (*inputs, *outputs) if any(d < 0 for d in t.dims)}
    if variable:
        raise BuildError(f"{model_name}: tensors {variable} have a variable axis after the batch axis; expected fixed "
                         f"dims after it (export with static shapes). The backend reads a variable axis as a token "
                         f"sequence (every such input of a request the same length, padded with its mask inside a "
                         f"batch), and the memory sizing, warm-up samples and request byte bound need a length: only "
                         f"the text recipes, which know their tokens and masks, serve one.")
    return inputs, outputs


def batching_error(session, feeds: dict[str, np.ndarray]) -> float:
    """Max |difference| over every output between each row run alone and all rows as one batch:
    what a request would see alone and inside a dynamic batch."""
    rows = len(next(iter(feeds.values())))
    together = session.run(None, feeds)
    alone = [session.run(None, {name: value[i:i + 1] for name, value in feeds.items()}) for i in range(rows)]
    return max(float(np.abs(np.concatenate([a[k] for a in alone]).astype(np.float64) - together[k]).max())
               for k in range(len(together)))


def build_onnx_file(model: ModelSpec, workdir: Path) -> dict[str, Any]:
    check_onnx_file_options(model)
    source = source_path(model)
    served = Path(workdir) / SERVED_ONNX
    served.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, served)
    check_onnx(served)
    inputs, outputs = servable_specs(model.name, served)
    try:
        session = onnxruntime_session(served)
    except Exception as exc:  # onnxruntime raises its own types
        raise BuildError(f"{model.name}: ONNX Runtime cannot open {source}: {str(exc).strip()[:400]}") from None
    try:
        feeds = synthetic_feeds(session, CHECK_ROWS, variable_dim=1, seed=int(model.options.get("seed", 0)))
    except ValueError as exc:
        raise BuildError(f"{model.name}: {exc}.") from None
    try:
        error = batching_error(session, feeds)
    except Exception as exc:  # a graph that needs other inputs than its declared shapes say
        raise BuildError(f"{model.name}: ONNX Runtime failed on {CHECK_ROWS} synthetic rows of the declared shapes "
                         f"{ {t.name: [-1, *t.dims] for t in inputs} }: {str(exc).strip()[:400]}") from None
    tolerance = float(model.options.get("batch_tolerance", DEFAULT_BATCH_TOLERANCE))
    if not np.isfinite(error):
        raise BuildError(f"{model.name}: the graph answers non-finite values for synthetic inputs; expected finite outputs.")
    if error > tolerance:
        raise BuildError(f"{model.name}: a row answers differently inside a batch of {CHECK_ROWS} than alone (max |diff| "
                         f"{error:.3g} > batch_tolerance {tolerance:g}): dynamic batching would change this model's "
                         f"answers (rows that interact, e.g. batch statistics exported in training mode). Re-export "
                         f"it in inference mode, or raise `options.batch_tolerance` if the difference is rounding.")
    return {
        "files": [SERVED_ONNX],
        "served_file": SERVED_ONNX,
        "report_sections": [],
        "source": {"path": str(source), "sha256": sha256_file(source)},
        "tensors": {"inputs": {t.name: [t.data_type, -1, *t.dims] for t in inputs},
                    "outputs": {t.name: [t.data_type, -1, *t.dims] for t in outputs}},
        "batching_check": {"rows": CHECK_ROWS, "max_abs_diff": error, "tolerance": tolerance},
        # the report's metric: how far a row's answer moves inside a batch (no labels to score against)
        "variants": {"fp32": {"file": SERVED_ONNX, "size_bytes": served.stat().st_size,
                              "metric": "max abs diff, alone vs batched", "value": error}},
    }
