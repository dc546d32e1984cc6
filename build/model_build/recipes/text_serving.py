"""The text embedder's four recipes; `text_pipeline` is the one served, so clients send plain text.

* `minilm_encoder` (e.g. `text_encoder`): the ONNX graph served by the `onnxruntime_cpu` backend
  with ragged batching (texts of different lengths share a dynamic batch) and sequence-length
  bucketing inside each batch (contracts/sequence_buckets.py).
* `text_tokenizer` (e.g. `text_tokenizer`): a Python-backend model whose code is committed at
  model_repository/<name>/1/model.py; install copies the encoder's tokenizer.json beside it.
  Its output tensors are the encoder's input tensors, read from the encoder's ONNX graph.
* `text_ensemble`: TEXT -> tokenizer -> encoder -> embedding as a Triton ensemble; its tensors
  are again read from the encoder's graph.
* `text_pipeline` (e.g. `text_embedder`, what is served): the same TEXT -> embedding in ONE model,
  the `onnxruntime_cpu` backend with its text front-end (serving/backend/text_frontend.py): tokenizer and
  encoder run in one execution, so a request pays one batching decision and one Python-backend
  round trip instead of the ensemble's two (with a batching window, the ensemble paid it twice).

The tokenizer and ensemble recipes build nothing themselves; they name the encoder in
`options.encoder` (and the ensemble its tokenizer in `options.tokenizer`), and installing them
needs the encoder built first: serving.toml lists the encoder before them.
"""
from __future__ import annotations

import json

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from model_build.errors import BuildError
from model_build.pipeline import install_file
from model_build.recipes.text import ATTENTION_MASK, TOKENIZER_JSON
from contracts.model_config import (
    TEXT_INPUT,
    render_ensemble_config,
    render_onnx_cpu_config,
    render_python_model_config,
    tensor_specs_from_onnx,
    text_ensemble_steps,
    tokenizer_tensor_specs,
    write_model_config,
)
from contracts.errors import ConfigError
from contracts.sequence_buckets import (BUCKETS_PARAMETER, LENGTH_INPUT_PARAMETER, MAX_LENGTH_PARAMETER,
                                       default_bucket_boundaries, format_bucket_boundaries)
from contracts.serving_spec import ModelSpec, ServingSpec

TOKENIZER_MODEL_CODE = "model.py"


def install_text_encoder(model: ModelSpec, serving: ServingSpec, record: dict[str, Any], workdir: Path, repository: Path) -> list[str]:
    """Copy the served variant to <repo>/<model>/1/model.onnx; config from the graph, bucketing on."""
    model_dir = Path(repository) / model.name
    onnx_dest = model_dir / "1" / "model.onnx"
    install_file(Path(workdir) / record["served_file"], onnx_dest)
    inputs, outputs = tensor_specs_from_onnx(onnx_dest)
    buckets = default_bucket_boundaries(int(record["max_length"]))
    parameters = {
        BUCKETS_PARAMETER: format_bucket_boundaries(buckets),
        LENGTH_INPUT_PARAMETER: ATTENTION_MASK,
        "pad_value": str(record["pad_token_id"]),
        # The length the encoder was exported and validated with: longer requests are refused (400).
        MAX_LENGTH_PARAMETER: str(record["max_length"]),
    }
    write_model_config(model_dir, render_onnx_cpu_config(model, serving, inputs, outputs, extra_parameters=parameters, ragged_inputs=True))
    return [model.name]


def installed_max_batch_size(model_dir: Path) -> int:
    """max_batch_size of an installed model's config.pbtxt: what Triton will actually enforce."""
    from contracts.model_config import read_model_config

    try:
        return int(read_model_config(model_dir).max_batch_size)
    except ConfigError as exc:
        raise BuildError(f"{exc} (install {Path(model_dir).name} first)") from None


def _option(model: ModelSpec, key: str) -> str:
    value = model.options.get(key)
    if not isinstance(value, str) or not value:
        raise BuildError(f"`models.{model.name}.options.{key}` must name the served model it uses, got {value!r}.")
    return value


def _only_options(model: ModelSpec, allowed: set[str]) -> None:
    unknown = set(model.options) - allowed
    if unknown:
        raise BuildError(f"`models.{model.name}.options` has unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}.")


def check_text_front_end_options(model: ModelSpec) -> None:
    """Before anything is built: the tokenizer's and the fused pipeline's one option, the encoder."""
    _only_options(model, {"encoder"})
    _option(model, "encoder")


def check_text_ensemble_options(model: ModelSpec) -> None:
    """Before anything is built: the ensemble's options, its encoder and tokenizer."""
    _only_options(model, {"encoder", "tokenizer"})
    _option(model, "encoder")
    _option(model, "tokenizer")
    if model.max_queue_size:  # rendered nowhere: an ensemble's config has no dynamic batcher
        raise BuildError(f"`models.{model.name}.max_queue_size` = {dict(model.max_queue_size)}: an ensemble has no queue of "
                         f"its own (Triton queues its requests at its steps); set it on the steps' [models.<name>] tables, "
                         f"models.{_option(model, 'tokenizer')} and models.{_option(model, 'encoder')}. If the starvation "
                         f"check proposed it for the ensemble's max_batch_size: that size only caps its steps' (it serves "
                         f"the smallest), so raise `models.{model.name}.max_batch_size` to theirs instead.")


def _named_model(model: ModelSpec, serving: ServingSpec, key: str, recipe: str) -> ModelSpec:
    """The served model `models.<model>.options.<key>` names, which must use `recipe`; else an error
    naming that field (a missing name said only "no model named ...")."""
    name = _option(model, key)
    try:
        named = serving.model(name)
    except ConfigError as exc:  # "no model named ...; known: [...]"
        raise BuildError(f"`models.{model.name}.options.{key}` = {name!r}: expected the name of a served model with "
                         f"recipe {recipe!r} ({exc})") from None
    if named.recipe != recipe:
        raise BuildError(f"`models.{model.name}.options.{key}` = {named.name!r} uses recipe {named.recipe!r}; expected {recipe!r}.")
    return named


def _encoder_build(model: ModelSpec, serving: ServingSpec, workdir: Path, repository: Path) -> tuple[dict[str, Any], Path]:
    """(the encoder's build record, its installed ONNX file); a clear error if it is not built yet."""
    encoder = _named_model(model, serving, "encoder", "minilm_encoder")
    from contracts.build_record import BuildRecordError, read_build_record

    onnx_path = Path(repository) / encoder.name / "1" / "model.onnx"
    try:
        record = read_build_record(Path(workdir).parent / encoder.name)
    except BuildRecordError:
        record = None
    if record is None or not onnx_path.exists():
        raise BuildError(
            f"{model.name} needs the encoder {encoder.name!r} built and installed first: list "
            f"[models.{encoder.name}] before [models.{model.name}] in serving.toml, or run "
            f"`python -m model_build build --models {encoder.name}`."
        )
    _check_encoder_current(model, encoder, record, onnx_path, Path(workdir).parent)
    return dict(record.data), onnx_path


def _check_encoder_current(model: ModelSpec, encoder: ModelSpec, record, onnx_path: Path, artifacts: Path) -> None:
    """The encoder's build is current for serving.toml, and its installed graph is the one its record
    serves. Why: `build --models text_embedder` after a change to the encoder (its variant, options,
    code) said "up to date" and installed the old graph beside a tokenizer.json from artifacts/."""
    from contracts.file_digest import sha256_file
    from model_build.pipeline import build_fingerprint
    import importlib

    # By name: the registry imports this module; and an `import` statement here would put every recipe's
    # code (the digit CNN, the LLM with the serving runtime) into this recipe's build fingerprint
    # (model_build.sources follows imports), so editing those rebuilt the text models for nothing.
    RECIPES = importlib.import_module("model_build.recipes.registry").RECIPES

    rebuild = f"run `python -m model_build build --models {encoder.name} {model.name}` (or `make build-engines`)"
    if record.fingerprint != build_fingerprint(RECIPES[encoder.recipe], encoder):
        raise BuildError(f"{model.name} needs the encoder {encoder.name!r}, whose build is out of date for serving.toml "
                         f"and the code: {rebuild}.")
    served = artifacts / encoder.name / (record.served_file or "")
    if not served.is_file() or sha256_file(served) != sha256_file(onnx_path):
        raise BuildError(f"{model.name} needs the encoder {encoder.name!r}: its installed graph {onnx_path} is not the "
                         f"one its build serves ({served}): {rebuild}.")


def build_text_tokenizer(model: ModelSpec, workdir: Path) -> dict[str, Any]:
    """Nothing to build: the tokenizer is the encoder's tokenizer.json plus committed code."""
    check_text_front_end_options(model)
    return {"files": [], "encoder": _option(model, "encoder")}


def install_text_tokenizer(model: ModelSpec, serving: ServingSpec, record: dict[str, Any], workdir: Path, repository: Path) -> list[str]:
    encoder_record, encoder_onnx = _encoder_build(model, serving, workdir, repository)
    version_dir = Path(repository) / model.name / "1"
    if not (version_dir / TOKENIZER_MODEL_CODE).exists():
        raise BuildError(f"{version_dir / TOKENIZER_MODEL_CODE} is missing: the tokenizer's code is committed there.")
    encoder_dir = Path(workdir).parent / encoder_record["model"]
    install_file(encoder_dir / TOKENIZER_JSON, version_dir / TOKENIZER_JSON)
    encoder_inputs, _ = tensor_specs_from_onnx(encoder_onnx)
    inputs, outputs = tokenizer_tensor_specs(encoder_inputs, TEXT_INPUT)
    parameters = {
        "tokenizer_file": TOKENIZER_JSON,
        "max_length": str(encoder_record["max_length"]),
        "pad_id": str(encoder_record["pad_token_id"]),
    }
    write_model_config(version_dir.parent, render_python_model_config(model, serving, inputs, outputs, parameters))
    return [model.name]


def check_follower_keeps_priorities(served: ModelSpec, serving: ServingSpec, encoder: str) -> None:
    """A model whose max_batch_size follows the encoder's measured size (the fused text pipeline) is
    not measured itself, so the starvation invariant (docs/priorities.md) is checked here at the size
    it is served with: an encoder given shorter queues of its own for its smaller batches does not give
    them to the models that follow it."""
    try:
        serving.check_lowest_priority_progress(served)
    except ConfigError as exc:
        raise BuildError(f"{exc} Here max_batch_size is not serving.toml's cap but {served.max_batch_size}, the size "
                         f"the build measured for `{encoder}`, which `{served.name}` follows.") from None


def build_text_pipeline(model: ModelSpec, workdir: Path) -> dict[str, Any]:
    """Nothing to build: the served encoder graph and its tokenizer.json, installed together."""
    check_text_front_end_options(model)
    return {"files": [], "encoder": _option(model, "encoder")}


def install_text_pipeline(model: ModelSpec, serving: ServingSpec, record: dict[str, Any], workdir: Path, repository: Path) -> list[str]:
    """TEXT [1] -> the encoder's outputs in one onnxruntime_cpu model: the encoder's served graph and
    tokenizer.json copied into <repo>/<model>/1/, bucketing on, max_batch_size at most the encoder's."""
    encoder_record, encoder_onnx = _encoder_build(model, serving, workdir, repository)
    version_dir = Path(repository) / model.name / "1"
    install_file(encoder_onnx, version_dir / "model.onnx")
    install_file(Path(workdir).parent / encoder_record["model"] / TOKENIZER_JSON, version_dir / TOKENIZER_JSON)
    _, outputs = tensor_specs_from_onnx(encoder_onnx)
    encoder_size = installed_max_batch_size(Path(repository) / encoder_record["model"])
    served = replace(model, max_batch_size=min(model.max_batch_size, encoder_size))
    if served.max_batch_size < model.max_batch_size:
        print(f"[build] {model.name}: max_batch_size {served.max_batch_size} (cap {model.max_batch_size}; "
              f"the encoder's measured size is {encoder_size})")
        check_follower_keeps_priorities(served, serving, encoder_record["model"])
    max_length = int(encoder_record["max_length"])
    parameters = {
        "tokenizer_file": TOKENIZER_JSON,
        "max_length": str(max_length),
        "pad_value": str(encoder_record["pad_token_id"]),
        BUCKETS_PARAMETER: format_bucket_boundaries(default_bucket_boundaries(max_length)),
        LENGTH_INPUT_PARAMETER: ATTENTION_MASK,
    }
    write_model_config(version_dir.parent, render_onnx_cpu_config(served, serving, (TEXT_INPUT,), outputs,
                                                                 extra_parameters=parameters))
    return [model.name]


def build_text_ensemble(model: ModelSpec, workdir: Path) -> dict[str, Any]:
    """Nothing to build: the ensemble is a config naming its tokenizer and encoder."""
    check_text_ensemble_options(model)
    return {"files": [], "encoder": _option(model, "encoder"), "tokenizer": _option(model, "tokenizer")}


def check_ensemble_request_sizes(ensemble: ModelSpec, steps: Sequence[ModelSpec], serving: ServingSpec) -> None:
    """Triton hands an ensemble's requests to its steps whole, so a step that bounds its starvation
    with smaller requests of its own (`[models.<step>] max_request_batch_size`) holds only if the
    ensemble's callers are held to them too (model_client reads the ensemble's sizes)."""
    sent = {p.name: p.max_request_batch_size for p in serving.priorities_for(ensemble)}
    taken = {name: min((level.max_request_batch_size, step.name) for step in steps for level in serving.priorities_for(step)
                       if level.name == name) for name in sent}  # per level: the smallest step size, and whose
    too_large = [name for name in sent if sent[name] > taken[name][0]]
    if too_large:
        table = ", ".join(f"{name} = {min(sent[name], taken[name][0])}" for name in sent
                          if name in too_large or name in ensemble.max_request_batch_size)
        steps_said = "; ".join(f"`models.{taken[name][1]}` takes {name} requests of at most {taken[name][0]} items, the "
                               f"ensemble's callers may send {sent[name]}" for name in too_large)
        raise BuildError(f"the ensemble `{ensemble.name}` hands its requests to its steps whole, so its callers must keep the "
                         f"steps' own request sizes (max_request_batch_size): {steps_said}. Set "
                         f"`[models.{ensemble.name}] max_request_batch_size = {{ {table} }}`.")


def install_text_ensemble(model: ModelSpec, serving: ServingSpec, record: dict[str, Any], workdir: Path, repository: Path) -> list[str]:
    tokenizer = _named_model(model, serving, "tokenizer", "text_tokenizer")
    encoder = _named_model(model, serving, "encoder", "minilm_encoder")
    check_ensemble_request_sizes(model, (tokenizer, encoder), serving)
    partitions = {m.name: serving.partition_of(m) for m in (model, tokenizer, encoder)}
    if len(set(partitions.values())) != 1:
        raise BuildError(
            f"an ensemble runs its steps in its own server: `models.*.partition` must be the same for {partitions}."
        )
    _, encoder_onnx = _encoder_build(model, serving, workdir, repository)
    encoder_inputs, encoder_outputs = tensor_specs_from_onnx(encoder_onnx)
    steps = text_ensemble_steps(tokenizer.name, encoder.name, encoder_inputs, encoder_outputs, TEXT_INPUT)
    # The steps' SERVED max_batch_size (the build may have lowered a cap by measuring memory).
    sizes: Mapping[str, int] = {name: installed_max_batch_size(Path(repository) / name) for name in (tokenizer.name, encoder.name)}
    served = replace(model, max_batch_size=min(model.max_batch_size, *sizes.values()))
    if served.max_batch_size < model.max_batch_size:
        print(f"[build] {model.name}: max_batch_size {served.max_batch_size} (cap {model.max_batch_size}; "
              f"an ensemble may not exceed its steps' {dict(sizes)})")
    config = render_ensemble_config(served, (TEXT_INPUT,), encoder_outputs, steps, sizes)
    model_dir = Path(repository) / model.name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)  # Triton needs a version directory, even empty
    write_model_config(model_dir, config)
    return [model.name]
