"""Recipe `onnx_file`: serve an ONNX file you bring, the way the project's own models are served.

    [models.my_model]
    recipe = "onnx_file"
    partition = "main"
    instance_count = 2
    max_batch_size = 32                       # a cap: `make build-engines` sizes it from measured memory
    options = { path = "models/my_model.onnx" }   # absolute, or relative to the checkout
    # a graph with variable axes after the batch (an image's height and width): the largest dims a
    # request may send, per such input; requests of equal shapes are batched together (Triton's rule)
    # options = { path = "models/ocr_rec.onnx", max_dims = { x = [3, 48, 320] } }

The model then gets what every served model gets: the dynamic batcher with the priority levels and
queue policies of serving.toml, its partition's cores, warmup, the backend's per-request input
checks and failure isolation, metrics, and a config rendered with Triton's schema (docs/own-model.md).
Nothing is trained, quantized or downloaded: the file is served as given (variant "fp32"; an INT8
variant needs calibration data and an accuracy budget that only a recipe knowing the model has).

What the build checks, so that a file the backend cannot serve fails here with a message instead of
at load time or, worse, answering wrongly under load (docs/own-model.md has the table):
- onnx.checker passes on the file as given, and ONNX Runtime opens it;
- every input and output has a dynamic first (batch) axis (a tensor of shape [batch] is declared [1]
  with a reshape, so clients send and get [batch, 1]); an input with variable axes after it has its
  largest dims in `options.max_dims`, and then Triton batches only requests of equal shapes (nothing is
  padded: a zero border changes a convolution's answer), so outputs may have variable axes too;
- Triton's warm-up request (zeros; ones for the `mask_inputs`) gets finite answers: a warm-up
  answered with an error fails the model's load, and can crash Triton 2.51;
- batching does not change answers: rows of synthetic input (`check_rows`, contracts.synthetic_requests;
  at `max_dims`) run alone and as one batch give each row the same answer, of the same shape, and as
  many output rows as input rows;
- the answers are finite.

The file's SHA-256, and its external data files', are part of the build fingerprint
(`onnx_file_inputs`): a changed file rebuilds. External data is folded into the one served file.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from contracts.errors import ConfigError
from contracts.file_digest import sha256_file
from contracts.layout import PROJECT_ROOT
from contracts.onnx_graph import gather_id_ranges, input_axis_names, shared_axis_places
from contracts.model_config import (INTEGER_TYPES, TensorSpec, row_dims, tensor_specs_from_onnx, warmup_feeds,
                                    warmup_ones_inputs, warmup_sequence_length)
from contracts.sequence_buckets import MASK_INPUTS_PARAMETER, default_bucket_boundaries
from contracts.serving_spec import ModelSpec, Variant
from contracts.synthetic_requests import synthetic_rows
from contracts.token_padding import concat_padded, sequence_pad_value
from model_build.errors import BuildError
from model_build.onnx_export.export import check_onnx, onnxruntime_session

SERVED_ONNX = "fp32.onnx"
#: Rows of synthetic input run alone and as one batch (`batching_error`).
CHECK_ROWS = 4
#: Largest |difference| between a row run alone and inside a batch, by default: float32 rounding of
#: kernels that pick other blocking for other batch sizes stays far below it.
DEFAULT_BATCH_TOLERANCE = 1e-4
#: protobuf's limit on one message: larger graphs need their weights in external files.
SINGLE_FILE_LIMIT_BYTES = 2**31 - 1
ONNX_FILE_OPTIONS = ("path", "batch_tolerance", "seed", "mask_inputs", "max_dims")


def source_path(model: ModelSpec) -> Path:
    """The file `options.path` names: absolute, or relative to the checkout (where `make` runs)."""
    path = model.options.get("path")
    if not isinstance(path, str) or not path.strip():
        raise BuildError(f"`models.{model.name}.options.path` = {path!r}: expected the path of an ONNX file "
                         f"(absolute, or relative to {PROJECT_ROOT}).")
    path = Path(path).expanduser()
    return path if path.is_absolute() else PROJECT_ROOT / path


def mask_inputs(model: ModelSpec) -> tuple[str, ...]:
    """`options.mask_inputs`: the inputs that are 0/1 masks (at least one 1 per row), which the backend
    then checks as such and warm-up fills with ones. Default none: a brought graph's `*mask` input may
    be a weight or a True-is-padding mask, so the naming rule of the text models does not apply."""
    return tuple(model.options.get("mask_inputs", ()))


def max_dims(model: ModelSpec) -> dict[str, tuple[int, ...]]:
    """`options.max_dims`: {input: the largest dims after the batch axis a request may send}, for the
    inputs with variable axes ({} for a graph without). Checked against the graph by `servable_specs`."""
    return {name: tuple(dims) for name, dims in (model.options.get("max_dims") or {}).items()}


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
    masks = model.options.get("mask_inputs", [])
    if not isinstance(masks, (list, tuple)) or not all(isinstance(m, str) and m and "," not in m for m in masks):
        raise BuildError(f"`models.{model.name}.options.mask_inputs` = {masks!r}: expected a list of input names.")
    largest = model.options.get("max_dims", {})
    if not isinstance(largest, dict) or not all(
            isinstance(dims, (list, tuple)) and dims and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1
                                                             for d in dims) for dims in largest.values()):
        raise BuildError(f"`models.{model.name}.options.max_dims` = {largest!r}: expected a table of input name -> "
                         f"the largest dims after the batch axis, each >= 1, e.g. {{ x = [3, 960, 960] }}.")


def external_data_files(path: Path) -> tuple[Path, ...]:
    """The files a graph keeps its weights in beside itself (onnx's external data), by their locations."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    graph = onnx.load(str(path), load_external_data=False).graph
    locations = {ExternalDataInfo(t).location for t in graph.initializer if uses_external_data(t)}
    return tuple(path.parent / location for location in sorted(locations))


def onnx_file_inputs(model: ModelSpec) -> dict[str, Any]:
    """Fingerprinted with the options: the file's content and its external data's, so a new file under
    the same name rebuilds."""
    path = source_path(model)
    if not path.is_file():
        return {"source_sha256": None}
    try:
        external = external_data_files(path)
    except Exception:  # noqa: BLE001 - not an ONNX file: the build says so, with the checker's words
        external = ()
    return {"source_sha256": sha256_file(path),
            "external_data": {f.name: sha256_file(f) if f.is_file() else None for f in external}}


def copy_served_file(model_name: str, source: Path, served: Path) -> None:
    """The file as given, or, when its weights live in external data files, one file holding them."""
    import onnx

    served.parent.mkdir(parents=True, exist_ok=True)
    if not external_data_files(source):
        shutil.copyfile(source, served)
        return
    graph = onnx.load(str(source))  # reads the external data from beside the file
    if graph.ByteSize() > SINGLE_FILE_LIMIT_BYTES:
        raise BuildError(f"{model_name}: {source} keeps {graph.ByteSize() / 2**30:.1f} GiB of weights in external data, "
                         f"over the 2 GiB of one served file; expected a graph under 2 GiB.")
    onnx.save(graph, str(served))


def servable_specs(model_name: str, onnx_path: Path, source: Path, largest: Mapping[str, Sequence[int]]):
    """(inputs, outputs) as the config declares them, or BuildError saying what the backend needs
    (naming `source`, the user's file, where `onnx_path` is the build's copy of it). `largest`: the
    model's `options.max_dims`, which must cover exactly the inputs with variable axes."""
    try:
        inputs, outputs = tensor_specs_from_onnx(onnx_path)
    except ConfigError as exc:
        batch_axis = "dynamic first (batch) axis" in str(exc)
        message = str(exc).replace(str(onnx_path), str(source))
        raise BuildError(f"{model_name}: {message}" + (" The onnxruntime_cpu backend concatenates requests along the first "
                                                   "axis; export the graph with a dynamic batch axis." if batch_axis else "")
                         ) from None
    problems = max_dims_problems(inputs, largest)
    if problems:
        raise BuildError(f"{model_name}: `options.max_dims` " + "; ".join(problems) + ". Requests of such an input are "
                         f"batched with requests of the same shape only; its largest dims bound what a request may "
                         f"send and size the warm-up, the batching check, max_batch_size and the request byte bound.")
    return inputs, outputs


def _dims_form(dims: Sequence[int]) -> str:
    """A graph's dims after the batch axis as a user writes their largest: `[3, N, N]`."""
    return "[" + ", ".join(str(d) if d > 0 else "N" for d in dims) + "]"


def max_dims_problems(inputs: Sequence[TensorSpec], largest: Mapping[str, Sequence[int]]) -> list[str]:
    """What is wrong with `options.max_dims` for these graph inputs (empty: nothing)."""
    variable = {t.name: t.dims for t in inputs if any(d < 0 for d in t.dims)}
    problems = [f"has no entry for input '{name}' of dims {[-1, *dims]} (variable axes after the batch axis): expected "
                f"its largest dims, e.g. {name} = {_dims_form(dims)}" for name, dims in variable.items() if name not in largest]
    names = {t.name for t in inputs}
    problems += [f"names '{name}', which is {'not an input of the graph' if name not in names else 'an input of fixed dims'}; "
                 f"expected some of {sorted(variable)}" for name in largest if name not in variable]
    for name, dims in variable.items():
        given = list(largest.get(name, dims))
        if name in largest and (len(given) != len(dims) or any(d > 0 and g != d for d, g in zip(dims, given))):
            problems.append(f"gives '{name}' dims {given}; expected {len(dims)} dims agreeing with the graph's fixed ones "
                            f"{_dims_form(dims)}")
    return problems


def named_axes_problems(graph, largest: Mapping[str, Sequence[int]]) -> list[str]:
    """Axes the graph names alike (`seq` of two inputs) given different largest lengths by `max_dims`: the
    backend refuses a request whose lengths there differ (serving.backend.input_contract), and Triton's
    warm-up runs at `max_dims`, so such a model would refuse its own warm-up and fail to load."""
    named = {name: axis_names[:len(largest[name])] for name, axis_names in input_axis_names(graph).items() if name in largest}
    lengths = {axis_name: {name: int(largest[name][axis]) for name, axis in places}
               for axis_name, places in shared_axis_places(named)}
    return [f"gives the axis '{name}' that the graph shares between {sorted(by_input)} the lengths {by_input}; expected "
            f"one length (a request must send them equally long)" for name, by_input in lengths.items()
            if len(set(by_input.values())) > 1]


def _check_masks(model: ModelSpec, inputs: Sequence[TensorSpec]) -> None:
    integer_inputs = {t.name for t in inputs if t.data_type in INTEGER_TYPES}
    wrong = [m for m in mask_inputs(model) if m not in integer_inputs]
    if wrong:
        raise BuildError(f"`models.{model.name}.options.mask_inputs`: {wrong} are not integer or boolean inputs of the "
                         f"graph; expected some of {sorted(integer_inputs)}.")


def _outputs_problem(outputs: Sequence[np.ndarray], names: Sequence[str], rows: int) -> str | None:
    """Why these answers to `rows` input rows cannot be served, or None."""
    for name, out in zip(names, outputs):
        if out.ndim == 0 or out.shape[0] != rows:
            return (f"output '{name}' has shape {list(out.shape)} for {rows} input row(s): its first axis is not the "
                    f"batch (the backend splits every output's first axis back into the requests)")
        if out.dtype.kind in "fc" and not np.isfinite(out).all():
            return f"output '{name}' holds NaN or Inf values"
    return None


def warmup_problem(session, inputs: Sequence[TensorSpec], masks: Sequence[str],
                   largest: Mapping[str, Sequence[int]] | None = None, longest_sequence: int | None = None) -> str | None:
    """What goes wrong with the warm-up sample Triton sends at load (contracts.model_config.warmup_feeds,
    at `largest` dims where given, token sequences as long as the config's warm-up makes them for
    `longest_sequence`): it must be answered, or the load fails."""
    ones = warmup_ones_inputs(inputs, {MASK_INPUTS_PARAMETER: ",".join(masks)})
    feeds = warmup_feeds(inputs, 1, ones, variable_dim=warmup_sequence_length(longest_sequence), sample_dims=largest)
    names = [o.name for o in session.get_outputs()]
    problem = _outputs_problem(session.run(names, feeds), names, 1)
    if problem is None:
        return None
    return (f"Triton's warm-up request at load (every input zeros{'; ones for ' + str(ones) if ones else ''}) gets an "
            f"answer that cannot be served: {problem}. A warm-up answered with an error fails the model's load (and "
            f"can crash Triton 2.51); expected finite answers for zero inputs (an epsilon in a normalisation), or "
            f"`options.mask_inputs` naming the 0/1 masks that need ones")


def check_rows(inputs: Sequence[TensorSpec], graph, rows: int, seed: int, masks: Sequence[str],
               largest: Mapping[str, Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """Synthetic rows for the batching check (contracts.synthetic_requests: floats from a normal
    distribution, integers drawn per element over the ids their lookup table allows, 0 or 1 where no
    table bounds them, masks all ones), so that rows differ in every input and a graph whose rows
    interact only through its ids or flags shows it; at the `largest` dims where given. `graph`: the
    ModelProto (without external data)."""
    return synthetic_rows(inputs, rows, seed, gather_id_ranges(graph), masks, sample_dims=largest)


def split_rows(feeds: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """One request per row of a batch of equal-shape feeds."""
    rows = len(next(iter(feeds.values())))
    return [{name: value[i:i + 1] for name, value in feeds.items()} for i in range(rows)]


def sequence_rows(inputs: Sequence[TensorSpec], graph, seed: int, masks: Sequence[str], longest: int) -> list[dict[str, np.ndarray]]:
    """CHECK_ROWS requests of token sequences of different lengths (the longest, a half, a fifth, one token)
    for the padded batching check, each drawn by contracts.synthetic_requests' rule."""
    ranges = gather_id_ranges(graph)
    return [synthetic_rows(inputs, 1, seed + i, ranges, masks, variable_dim=n) for i, n in enumerate(sequence_lengths(longest))]


def sequence_lengths(longest: int) -> list[int]:
    """The padded batching check's request lengths: the longest, a half, a fifth, one token."""
    return [longest, max(1, longest // 2), max(1, longest // 5), 1][:CHECK_ROWS]


def batching_error(session, rows: Sequence[Mapping[str, np.ndarray]], pad_values: Mapping[str, int] | None = None) -> float:
    """Max |difference| over every output between each request run alone and all of them as one batch:
    what a request would see alone and inside a dynamic batch. `rows`: one request each; the batch is
    them concatenated, token sequences right-padded to the longest with `pad_values` (the backend's rule,
    contracts.token_padding). Raises ValueError when an answer has not one output row per input row (its
    rows could not be split back into requests), or a row's output shape depends on its batch mates."""
    names = [o.name for o in session.get_outputs()]
    together = session.run(names, {name: concat_padded([r[name] for r in rows], (pad_values or {}).get(name, 0))
                                   for name in rows[0]})
    alone = [session.run(names, dict(r)) for r in rows]
    for count, answers in [(sum(len(next(iter(r.values()))) for r in rows), together), *((1, a) for a in alone)]:
        problem = _outputs_problem(answers, names, count)
        if problem:
            raise ValueError(problem)
    for k, name in enumerate(names):
        shapes = {tuple(a[k].shape[1:]) for a in alone}
        if shapes != {tuple(together[k].shape[1:])}:
            raise ValueError(f"output '{name}' has row shape(s) {sorted(map(list, shapes))} alone but "
                             f"{list(together[k].shape[1:])} inside a batch: its variable axes depend on the rows "
                             f"batched together, so a row's answer could not be cut back out of the batch's")
    return max(float(np.abs(np.concatenate([a[k] for a in alone]).astype(np.float64) - together[k]).max())
               for k in range(len(together)))


def padded_sequences(model: ModelSpec, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> tuple[str, int] | None:
    """(the mask marking real tokens, the longest sequence) when the graph's variable inputs are token
    sequences to pad across a batch, as the project's text encoder's are: every variable input is
    [batch, N] and one of them is a declared 0/1 mask (`options.mask_inputs`; its zeros are what make the
    padding harmless, which the batching check then verifies). Else None: batched by equal shapes only."""
    variable = [t for t in inputs if any(d < 0 for d in t.dims)]
    mask = next((t.name for t in variable if t.name in mask_inputs(model)), None)
    if mask is None or any(t.dims != (-1,) for t in variable):
        return None
    lengths = {t.name: max_dims(model)[t.name][0] for t in variable}
    if len(set(lengths.values())) > 1:
        raise BuildError(f"{model.name}: `options.max_dims` gives the token sequences {lengths}: they are padded together "
                         f"to one length per batch; expected one longest length for all of them.")
    shaped = {t.name: [-1, *t.dims] for t in outputs if any(d < 0 for d in t.dims)}
    if shaped:
        raise BuildError(f"{model.name}: outputs {shaped} have variable axes, but the inputs are token sequences padded "
                         f"to their batch's longest (mask '{mask}'), and a padded output axis cannot be cut back per "
                         f"request; expected fixed output dims (pool in the graph), or no `mask_inputs`, to batch "
                         f"sequences of equal lengths only.")
    return mask, next(iter(lengths.values()))


def answer_checks(model: ModelSpec, session, graph, inputs: Sequence[TensorSpec], largest: Mapping[str, Sequence[int]],
                  sequences: tuple[str, int] | None) -> tuple[float, float]:
    """(batching check's max |diff|, its tolerance) once Triton's warm-up is answered and rows batched (padded
    token sequences where `sequences`, else equal shapes at `largest`) answer as alone; else BuildError."""
    seed = int(model.options.get("seed", 0))
    try:  # the warm-up as Triton will send it (token sequences: 16 long, contracts.model_config.render_warmup)
        warmup = (warmup_problem(session, inputs, mask_inputs(model), longest_sequence=sequences[1]) if sequences
                  else warmup_problem(session, inputs, mask_inputs(model), largest))
        if sequences:
            pads = {t.name: sequence_pad_value(t.name, 0, sequences[0]) for t in inputs}
            error = batching_error(session, sequence_rows(inputs, graph, seed, mask_inputs(model), sequences[1]), pads)
        else:
            error = batching_error(session, split_rows(check_rows(inputs, graph, CHECK_ROWS, seed, mask_inputs(model), largest)))
    except ValueError as exc:
        raise BuildError(f"{model.name}: {exc}; expected one output row per input row, finite.") from None
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime's own errors: a graph that needs other inputs than declared
        ran = (f"token sequences {sequence_lengths(sequences[1])} long" if sequences
               else f"rows of {({t.name: row_dims(t, 1, largest) for t in inputs})}")
        raise BuildError(f"{model.name}: ONNX Runtime failed on synthetic inputs of the declared shapes "
                         f"{ {t.name: [-1, *t.dims] for t in inputs} } ({ran}): {str(exc).strip()[:400]}") from None
    if warmup:
        raise BuildError(f"{model.name}: {warmup}.")
    tolerance = float(model.options.get("batch_tolerance", DEFAULT_BATCH_TOLERANCE))
    if error > tolerance:
        raise BuildError(f"{model.name}: a row answers differently inside a batch of {CHECK_ROWS} than alone (max |diff| "
                         f"{error:.3g} > batch_tolerance {tolerance:g}): dynamic batching would change this model's "
                         f"answers (rows that interact, e.g. batch statistics exported in training mode). Re-export "
                         f"it in inference mode, or raise `options.batch_tolerance` if the difference is rounding.")
    return error, tolerance


def build_onnx_file(model: ModelSpec, workdir: Path) -> dict[str, Any]:
    import onnx

    check_onnx_file_options(model)
    source = source_path(model)
    check_onnx(source)  # the user's file, with its external data where it lies: messages name it
    served = Path(workdir) / SERVED_ONNX
    copy_served_file(model.name, source, served)
    largest = max_dims(model)
    inputs, outputs = servable_specs(model.name, served, source, largest)
    _check_masks(model, inputs)
    try:
        session = onnxruntime_session(served)
    except Exception as exc:  # onnxruntime raises its own types
        raise BuildError(f"{model.name}: ONNX Runtime cannot open {source}: {str(exc).strip()[:400]}") from None
    graph = onnx.load(str(served), load_external_data=False)
    sequences = padded_sequences(model, inputs, outputs)
    problems = [] if sequences else named_axes_problems(graph, largest)
    if problems:
        raise BuildError(f"{model.name}: `options.max_dims` " + "; ".join(problems) + ".")
    error, tolerance = answer_checks(model, session, graph, inputs, largest, sequences)
    if largest and not sequences:
        print(f"[build] {model.name}: inputs {sorted(largest)} are batched by equal shapes (Triton ends a batch at a shape "
              f"change): the starvation bound of docs/priorities.md holds only among requests of one shape; send the "
              f"batch level's work at the realtime level's shapes, or few shapes (docs/own-model.md)")
    return {
        "files": [SERVED_ONNX],
        "served_file": SERVED_ONNX,
        "report_sections": [],
        "source": {"path": str(source), **onnx_file_inputs(model)},
        "tensors": {"inputs": {t.name: [t.data_type, -1, *t.dims] for t in inputs},
                    "outputs": {t.name: [t.data_type, -1, *t.dims] for t in outputs}},
        "mask_inputs": list(mask_inputs(model)),
        "max_dims": {name: list(dims) for name, dims in largest.items()},
        # token sequences padded across a batch (ragged inputs), or None: batched by equal shapes
        "padded_sequences": {"mask": sequences[0], "max_length": sequences[1],
                             # length buckets (contracts.sequence_buckets) where the backend can use them: every
                             # input a sequence; a review measured +25-35% texts/s at c=16 over padding to the longest
                             "buckets": list(default_bucket_boundaries(sequences[1]))
                             if all(t.dims == (-1,) for t in inputs) else []} if sequences else None,
        "batching_check": {"rows": CHECK_ROWS, "max_abs_diff": error, "tolerance": tolerance},
        # the report's metric: how far a row's answer moves inside a batch (no labels to score against)
        "variants": {"fp32": {"file": SERVED_ONNX, "size_bytes": served.stat().st_size,
                              "metric": "max abs diff, alone vs batched", "value": error}},
    }

