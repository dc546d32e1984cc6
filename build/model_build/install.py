"""Installing a built model into the model repository: its own module, outside every recipe's build
sources (`model_build.sources`), so that changing how models are installed re-renders configs (cheap,
every run) without rebuilding any model."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from contracts.model_config import render_onnx_cpu_config, tensor_specs_from_onnx, write_model_config
from contracts.rendered_configs import write_rendered_from
from contracts.sequence_buckets import (BUCKETS_PARAMETER, LENGTH_INPUT_PARAMETER, MASK_INPUTS_PARAMETER,
                                       MAX_INPUT_DIMS_PARAMETER, MAX_LENGTH_PARAMETER, format_bucket_boundaries,
                                       max_input_dims_value)
from contracts.serving_spec import ModelSpec, ServingSpec
from model_build.pipeline import BuildPaths, Recipe, install_file
from model_build.recipes.onnx_file import mask_inputs, max_dims


def install_served(recipe: Recipe, model: ModelSpec, serving: ServingSpec, record: Mapping[str, Any], paths: BuildPaths,
                   config: Path | str, rendered_settings: str) -> list[str]:
    """Install a built model into the repository and note which serving.toml its config was rendered from.

    Both go together, in `build` and in `size-batches`: `serving serve` refuses configs whose note names an
    older version of the same file, so an install without its note would be refused, and a note without
    its install would let stale configs pass.
    """
    installed = recipe.install(model, serving, record, paths.workdir(model.name), paths.repository)
    write_rendered_from(paths.workdir(model.name), config, rendered_settings)
    return installed


def install_onnx_model(model: ModelSpec, serving: ServingSpec, record: Mapping[str, Any], workdir: Path, repository: Path,
                       extra_parameters: Mapping[str, str] | None = None, ragged_inputs: bool = False) -> list[str]:
    """Copy the served variant to <repo>/<model>/1/model.onnx and render its config from the graph."""
    served = workdir / record["served_file"]
    model_dir = repository / model.name
    onnx_dest = model_dir / "1" / "model.onnx"
    install_file(served, onnx_dest)
    inputs, outputs = tensor_specs_from_onnx(onnx_dest)
    write_model_config(model_dir, render_onnx_cpu_config(model, serving, inputs, outputs, extra_parameters=extra_parameters,
                                                         ragged_inputs=ragged_inputs))
    return [model.name]


def install_onnx_file(model: ModelSpec, serving: ServingSpec, record: Mapping[str, Any], workdir: Path,
                      repository: Path) -> list[str]:
    """A brought ONNX file (recipe onnx_file), with the backend told exactly which inputs are 0/1 masks and
    how its variable axes are batched, as the build decided (its record's `padded_sequences`): token
    sequences padded across a batch (ragged inputs, the mask and longest length the backend checks), or
    any other variable axes by equal shapes, never padded, within their largest dims."""
    parameters = {MASK_INPUTS_PARAMETER: ",".join(mask_inputs(model))}
    sequences, largest = record.get("padded_sequences"), max_dims(model)
    if sequences:
        parameters[LENGTH_INPUT_PARAMETER] = sequences["mask"]
        parameters[MAX_LENGTH_PARAMETER] = str(sequences["max_length"])
        if sequences.get("buckets"):
            parameters[BUCKETS_PARAMETER] = format_bucket_boundaries(sequences["buckets"])
    elif largest:
        parameters[MAX_INPUT_DIMS_PARAMETER] = max_input_dims_value(largest)
    return install_onnx_model(model, serving, record, workdir, repository, extra_parameters=parameters,
                              ragged_inputs=bool(sequences))
