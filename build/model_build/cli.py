"""`python -m model_build build`: build what serving.toml asks for, install it, write the report."""
from __future__ import annotations

import argparse
import os
import sys

from model_build.sizing.batch_sizes import apply_measured_batch_size, cmd_size_batches
from model_build.errors import BuildError
from model_build.install import install_served
from model_build.pipeline import BuildPaths, build_model
from model_build.recipes.registry import recipe_for
from model_build.reports.build_report import served_rows, write_build_report
from contracts.rendered_configs import load_serving_spec_and_digest
from contracts.errors import ServingError
from contracts.partition_plan import plan_for_this_host
from contracts.serving_spec import ModelSpec, ServingSpec

from contracts.layout import PROJECT_ROOT, SERVING_CONFIG
from contracts.command_line import run_subcommand


def _build_one(job: tuple) -> str:
    """A worker of `prebuild`: one model's build (not its install), in its own process."""
    model, project_root, force = job
    build_model(recipe_for(model.recipe), model, BuildPaths(project_root), force=force)
    return model.name


def prebuild(models, paths: BuildPaths, force: bool, jobs: int) -> set[str]:
    """Build models `jobs` at a time (one thread each) before the sequential size-and-install pass;
    returns the names built now. For hosts with more cores than the builds use: on the 2-core
    development machine two 1-thread builds took 7.3 min against 7.0 min one after the other with
    2 threads, so the default is 1. Installs stay sequential and in declaration order (an ensemble
    installs after its steps). Latency figures a parallel build records are taken beside another
    build: `make benchmark-precision` measures them alone."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from model_build.pipeline import is_built

    todo = [m for m in models if force or not is_built(recipe_for(m.recipe), m, paths)]
    if jobs <= 1 or len(todo) <= 1:
        return set()
    todo.reverse()  # the expensive recipes are declared last (the LLM, the encoder before its users)
    from model_build.pipeline import BUILD_THREADS_ENV

    previous = os.environ.get(BUILD_THREADS_ENV)
    os.environ.setdefault(BUILD_THREADS_ENV, str(max(1, (os.cpu_count() or 1) // jobs)))  # the workers inherit it
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            return set(pool.map(_build_one, [(m, paths.project_root, force) for m in todo]))
    finally:
        if previous is None:
            os.environ.pop(BUILD_THREADS_ENV, None)


def served_variant(model: ModelSpec, serving: ServingSpec) -> str:
    """What the build line says is served: a model that follows an encoder (the fused embedder, the
    tokenizer) serves that encoder's variant, not its own `variant` field (which it does not use)."""
    encoder = model.options.get("encoder")
    if encoder:
        return f"follows {encoder} (served variant {serving.served_variant(model.name).value})"
    return f"served variant {model.variant.value}"


def kept_records(serving: ServingSpec, built: set[str], paths: BuildPaths) -> list[dict]:
    """The build records of the models this run did not build (--models named others), in serving.toml's
    order: the report is rewritten each run, and one from a partial build lost the rest (an unknown
    name left it empty)."""
    from contracts.build_record import BuildRecordError, read_build_record

    kept = []
    for model in serving.models:
        if model.name not in built:
            try:
                kept.append(dict(read_build_record(paths.workdir(model.name)).data))
            except BuildRecordError:
                continue  # never built here: nothing to report
    return kept


def cmd_build(args: argparse.Namespace) -> int:
    # the settings read now, not at the end of a build of minutes (an edit meanwhile is not rendered)
    serving, rendered_settings = load_serving_spec_and_digest(args.config)
    paths = BuildPaths(PROJECT_ROOT)
    known = [m.name for m in serving.models]
    unknown = sorted(set(args.models or ()) - set(known))
    if unknown:
        raise BuildError(f"--models {unknown}: not in {args.config}; expected some of {known}.")
    wanted = set(args.models or known)
    plan, gpu = plan_for_this_host(serving)  # memory budgets and threads for max_batch_size sizing
    gpu_models = [m.name for m in serving.models if m.device.value == "gpu" and m.name in wanted]
    if gpu_models and not gpu.present:
        raise BuildError(f"models {gpu_models} have `device = \"gpu\"` but this host has no usable GPU ({gpu.detail}); "
                         "set `device = \"cpu\"` for them or build on a GPU host.")
    if not gpu.present:
        print(f"[size-batches] {gpu.detail}: engine device memory not measured; sizing from ONNX Runtime CPU memory")
    # Every model's options first: a typo in the last model failed the run after the others were built
    # and installed, and (checked only inside its build) after its good build's record was removed.
    for model in (m for m in serving.models if m.name in wanted):
        check = recipe_for(model.recipe).check
        if check is not None:
            check(model)
    records = []
    built_now = prebuild([m for m in serving.models if m.name in wanted], paths, args.force, args.jobs)
    for model in serving.models:
        if model.name not in wanted:
            continue
        recipe = recipe_for(model.recipe)
        record, rebuilt = build_model(recipe, model, paths, force=args.force and model.name not in built_now)
        rebuilt = rebuilt or model.name in built_now
        model, serving = apply_measured_batch_size(model, serving, plan, record, paths)
        installed = install_served(recipe, model, serving, record, paths, args.config, rendered_settings)
        state = "built" if rebuilt else "up to date (no work done)"
        print(f"[build] {model.name}: {state}; {served_variant(model, serving)}; installed {', '.join(installed)}")
        records.append(record)
    order = {name: i for i, name in enumerate(known)}
    records = sorted([*records, *kept_records(serving, wanted, paths)],  # the report covers every served model
                     key=lambda record: order.get(record.get("model"), len(order)))
    from model_build.engines.tensorrt import run_tensorrt_step  # GPU engines: one line and no file without a GPU

    engine_section, skipped = run_tensorrt_step(records, serving, paths.artifacts)
    served = served_rows(paths.repository, [(m.name, served_variant(m, serving)) for m in serving.models])
    report = write_build_report(records, paths.reports, skipped=skipped, extra_sections=[engine_section] if engine_section else [],
                                served=served)
    print(f"[build] report: {report.relative_to(PROJECT_ROOT)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from contracts.onnx_sessions import keep_onnxruntime_offline

    keep_onnxruntime_offline()  # before anything imports onnxruntime (validation, calibration, sizing)
    parser = argparse.ArgumentParser(prog="model_build", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build and install every model in the serving configuration")
    build.add_argument("--config", default=str(SERVING_CONFIG))
    build.add_argument("--models", nargs="*", help="only these models (default: all)")
    build.add_argument("--force", action="store_true", help="rebuild even if the inputs are unchanged")
    build.add_argument("--jobs", type=int, default=1,
                       help="models built at once, one thread each, before the sequential install pass (default 1: measured "
                            "on 2 cores, two 1-thread builds took as long as one 2-thread build after the other, 7.3 vs 7.0 min)")
    build.set_defaults(func=cmd_build)
    sizes = sub.add_parser("size-batches", help="measure memory per batch size of built models; re-render their configs")
    sizes.add_argument("--config", default=str(SERVING_CONFIG))
    sizes.add_argument("--models", nargs="*", help="only these models (default: all)")
    sizes.add_argument("--force", action="store_true", help="measure again even if cached measurements match")
    sizes.set_defaults(func=cmd_size_batches)
    from model_build.reports.benchmark import add_benchmark_parser  # FP32 vs INT8-mixed, calibration study

    add_benchmark_parser(sub, PROJECT_ROOT)
    return run_subcommand(parser, argv, (BuildError, ServingError))


if __name__ == "__main__":
    sys.exit(main())
