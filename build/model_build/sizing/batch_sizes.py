"""Build step between `build` and `install`: measure memory per batch size and set max_batch_size.

The rule and the probe live in `model_build.sizing.batch_sizing`; this applies them to what a recipe built
(its record's `served_file`) so the config.pbtxt the recipe then renders carries the measured
max_batch_size. Measurements are cached in artifacts/<model>/batch_sizing.json.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from model_build.errors import BuildError
from model_build.install import install_served
from model_build.pipeline import BuildPaths
from model_build.sizing.batch_sizing import MEMORY_BUDGET_FRACTION, served_model_spec, size_model_batches, sizing_path
from contracts.rendered_configs import load_serving_spec_and_digest
from contracts.build_record import BuildRecordError, read_build_record
from contracts.errors import ConfigError
from contracts.partition_plan import PartitionPlan
from contracts.serving_spec import ModelSpec, ServingSpec


def apply_measured_batch_size(
    model: ModelSpec, serving: ServingSpec, plan: PartitionPlan, record: Mapping[str, Any], paths: BuildPaths,
    force: bool = False,
) -> tuple[ModelSpec, ServingSpec]:
    """(model, serving) with the model's max_batch_size replaced by the measured choice.

    Models whose record names no ONNX file (e.g. a Python-only step) keep their cap and say so.
    """
    served = str(record.get("served_file", ""))
    onnx = paths.workdir(model.name) / served
    if not served.endswith(".onnx") or not onnx.is_file():
        if record.get("encoder"):  # the text front-ends: their install takes what the encoder's sizing chose
            print(f"[size-batches] {model.name}: nothing to measure (no ONNX file of its own; it follows "
                  f"{record['encoder']})")
        else:
            print(f"[size-batches] {model.name}: no served ONNX file in its build record; max_batch_size stays at its "
                  f"cap {model.max_batch_size}")
        return model, serving
    decision = size_model_batches(model, serving, plan, onnx, sizing_path(paths.artifacts, model.name), force=force)
    sized = served_model_spec(model, decision)
    try:
        return sized, replace(serving, models=tuple(sized if m.name == model.name else m for m in serving.models))
    except ConfigError as exc:  # serving.toml's cap passed these checks; the measured size does not
        if sized.max_batch_size == model.max_batch_size:
            raise
        partition = plan.partition_of(model.name)
        raise BuildError(
            f"{exc} Here max_batch_size is not serving.toml's {model.max_batch_size} but {sized.max_batch_size}, what the "
            f"measured memory allows ({decision.budget_bytes / 2**20:.1f} MiB per instance: {MEMORY_BUDGET_FRACTION:.0%} of partition "
            f"{decision.partition}'s {partition.memory_mb} MiB split evenly over its {len(partition.models)} models "
            f"{list(partition.models)} and this model's {model.instance_count} instance(s), so a model added to the "
            f"partition lowers it; artifacts/{model.name}/batch_sizing.json): give partition {decision.partition} more "
            f"memory_mb, fewer instances of this model, or a partition of its own.") from None


def cmd_size_batches(args) -> int:
    """`python -m model_build size-batches`: (re)measure built models and re-render their configs."""
    import json

    from model_build.cli import PROJECT_ROOT
    from model_build.recipes.registry import recipe_for
    from contracts.partition_plan import plan_for_this_host

    # the settings read now, not at the end of a build of minutes (an edit meanwhile is not rendered)
    serving, rendered_settings = load_serving_spec_and_digest(args.config)
    paths = BuildPaths(PROJECT_ROOT)
    plan, gpu = plan_for_this_host(serving)
    if not gpu.present:
        print(f"[size-batches] {gpu.detail}: engine device memory not measured; sizing from ONNX Runtime CPU memory")
    wanted = set(args.models or [m.name for m in serving.models])
    for model in serving.models:
        if model.name not in wanted:
            continue
        try:
            record = dict(read_build_record(paths.workdir(model.name)).data)
        except BuildRecordError as exc:
            raise BuildError(str(exc)) from None
        sized, sized_serving = apply_measured_batch_size(model, serving, plan, record, paths, force=args.force)
        install_served(recipe_for(model.recipe), sized, sized_serving, record, paths, args.config, rendered_settings)
    return 0
