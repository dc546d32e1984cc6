"""`perf_sweep run`: every served model's sweeps, the A/B comparisons, the report.

Order of work: read run/manifest.json (where each model is served) and serving.toml (what it is);
per model, ask the server for its inputs and generate production-like input files; run a
concurrency sweep, find its knee, then a Poisson request-rate sweep planned around the measured
peak; the in-process limit of each swept text model (fused or ensemble) (see `text_limit.py`); then the A/B block
(see `ab.py`) for the main model; finally results.json (`contracts.perf_results`) and report.md in
reports/perf/<timestamp>/.
Headlines start with each model's served throughput as a fraction of its in-process limit.
"""
from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from perf_sweep import inputs as gen
from perf_sweep.errors import SweepPlanError, SweepRunError
from perf_sweep.knee import KneeResult, LoadPoint, find_knee
from perf_sweep.plan import Endpoint, LoadMode, Measurement, SweepSpec, concurrency_levels, request_rate_levels
from perf_sweep.results import PerfRecord
from perf_sweep.runner import RunFolder, run_sweep
from perf_sweep.text_limit import is_fused_text_model

from contracts.digit_split import digit_test_split_path
from contracts.layout import ARTIFACTS_DIR, MANIFEST, PROJECT_ROOT, REPORTS_DIR, SERVING_CONFIG
from contracts.perf_results import PerfRunResults, write_perf_results


@dataclass(frozen=True)
class CampaignOptions:
    config: Path = SERVING_CONFIG
    manifest: Path = MANIFEST
    out_root: Path = REPORTS_DIR / "perf"
    artifacts: Path = ARTIFACTS_DIR
    run_id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S"))
    models: tuple[str, ...] = ()  # empty: every model in the manifest
    max_concurrency: int = 32
    rate_fractions: tuple[float, ...] = (0.25, 0.5, 0.8, 1.1)
    measurement: Measurement = Measurement()
    seed: int = 0
    #: Longest text in tokens; None: the `max_length` option of the served text model(s), else 128.
    text_max_tokens: int | None = None
    text_count: int = 400
    #: Measure each text ensemble's in-process limit (tokenize + encode as served) before and after its sweeps.
    text_limit: bool = True
    ab_model: str | None = "digit_classifier"
    static_batch: int = 8
    delays_ms: tuple[float, ...] = (0, 2, 5, 10, 20)
    sparse_rate: float = 20.0
    loadgen_seconds: float = 6.0
    #: Write the chosen max_queue_delay into serving.toml (the source of truth) after the run.
    write_back: bool = False
    #: The peer comparison section (perf_sweep.peers; SKIPPED when .venv/peers is not installed).
    peers: bool = True
    peers_quick: bool = False
    command: str = "python -m perf_sweep run"

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise SweepPlanError(f"`max_concurrency` = {self.max_concurrency} must be >= 1.")
        if self.text_max_tokens is not None and self.text_max_tokens < 8:
            raise SweepPlanError(f"`text_max_tokens` = {self.text_max_tokens} must be >= 8.")
        if self.loadgen_seconds <= 0 or self.sparse_rate <= 0:
            raise SweepPlanError("`loadgen_seconds` and `sparse_rate` must be > 0.")
        if self.write_back and self.ab_model is None:
            raise SweepPlanError("`write_back` writes the delay the A/B block chooses, and the A/B block is off "
                                 "(--no-ab): drop one of them.")
        if self.out_root.exists() and not self.out_root.is_dir():
            raise SweepPlanError(f"`out_root` = {self.out_root} is a file: allowed a folder (made when missing).")


def unused_folder(path: Path) -> Path:
    """`path`, or `path-2`, `path-3`, ... when it exists: two runs started within one second shared a
    folder, and one's report replaced the other's while both printed its path (a review, 2026-12-07)."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def endpoints_from_manifest(manifest: Mapping[str, Any]) -> tuple[Endpoint, ...]:
    """Endpoints of every model in a run/manifest.json document (written by `serving serve`)."""
    from contracts.manifest import ManifestError, as_manifest

    try:
        document = as_manifest(manifest)
    except ManifestError as exc:
        raise SweepPlanError(f"{exc}") from None
    if not document.models:
        raise SweepPlanError("the server manifest lists no models: start the servers with `make serve`.")
    endpoints = []
    for name, entry in sorted(document.models.items()):
        missing = [k for k in ("http", "grpc", "metrics") if not getattr(entry, k)]
        if missing:
            raise SweepPlanError(f"manifest entry of model {name!r} lacks {missing}.")
        part = document.partition_of(name)
        endpoints.append(Endpoint(model=name, http_url=entry.http, grpc_url=entry.grpc, metrics_url=entry.metrics,
                                  server=part.name, cpus=part.cpus, intra_op_threads=part.intra_op_threads,
                                  reachable_cpus=part.runs_on))
    return tuple(endpoints)


@dataclass(frozen=True)
class PreparedInputs:
    """An input file for perf_analyzer, the same samples as an array for the Python client."""

    input_name: str
    kind: str  # "image", "text", "synthetic" (a brought model) or "random" (not swept)
    path: str  # a file, or "random"
    samples: Any  # np.ndarray [N, *dims] or None
    datatype: str
    description: str


def input_kind(model_config: Mapping[str, Any]) -> tuple[str, str]:
    """("image", name) for one FP32 [1,8,8] input, ("text", name) for one string input, else
    ("random", "") -- perf_analyzer's random data, flagged in the report as not production-like."""
    model_inputs = model_config.get("input", [])
    if len(model_inputs) == 1:
        tensor = model_inputs[0]
        dims = [int(d) for d in tensor.get("dims", [])]
        if tensor.get("data_type") == "TYPE_FP32" and dims == [1, 8, 8]:
            return "image", tensor["name"]
        if tensor.get("data_type") == "TYPE_STRING":
            return "text", tensor["name"]
    return "random", ""


def ensemble_steps(model_configs) -> set[str]:
    """Names of models that some ensemble calls as a step (swept through the ensemble instead)."""
    return {step["model_name"] for config in model_configs
            for step in (config.get("ensemble_scheduling") or {}).get("step", [])}


def fetch_model_config(http_url: str, model: str) -> dict[str, Any]:
    from serving.runtime.model_readiness import served_model_config

    host, _, port = http_url.rpartition(":")
    try:
        return served_model_config(host, int(port), model, timeout_s=10)
    except OSError as exc:
        raise SweepRunError(f"could not read {model}'s config from http://{http_url}: {exc}") from None


def text_max_tokens(spec, explicit: int | None = None) -> int:
    """The token length texts are generated up to: explicit, else the served text models' max_length."""
    if explicit:
        return explicit
    lengths = [int(m.options["max_length"]) for m in spec.models if "max_length" in (m.options or {})]
    return max(lengths) if lengths else 128


def prepare_inputs(model: str, model_config: Mapping[str, Any], out_dir: Path, opts: CampaignOptions,
                   max_tokens: int = 128, brought: bool = False) -> PreparedInputs:
    """The model's inputs for the sweeps; `brought`: a model of recipe onnx_file, swept with synthetic
    valid rows (gen.synthetic_input_data) when its inputs are not the project's kinds."""
    kind, name = input_kind(model_config)
    if kind == "image":
        split = digit_test_split_path(opts.artifacts)
        images = gen.sample_digit_images(gen.load_test_split_images(split), seed=opts.seed)
        path = gen.write_input_data(out_dir / f"{model}.json", gen.image_input_data(images, name))
        text = f"{len(images)} held-out test-split digit images ({split.relative_to(PROJECT_ROOT) if split.is_relative_to(PROJECT_ROOT) else split}), seed {opts.seed}, file `inputs/{path.name}`"
        return PreparedInputs(name, kind, str(path), images, "FP32", text)
    if kind == "text":
        tokenizer = gen.minilm_tokenizer()
        texts, paragraphs = gen.long_tailed_texts(opts.text_count, max_tokens, tokenizer, seed=opts.seed)
        summary = gen.LengthSummary.of([tokenizer.count(t) for t in texts], max_tokens)
        path = gen.write_input_data(out_dir / f"{model}.json", gen.string_input_data(texts, name))
        text = (f"{summary.count} texts from installed packages' documentation ({paragraphs} paragraphs), "
                f"MiniLM token lengths P50 {summary.p50:.0f}, P95 {summary.p95:.0f}, max {summary.longest}; "
                f"{summary.near_max_fraction:.1%} at >= {summary.near_max_threshold} of {summary.max_tokens} tokens; "
                f"seed {opts.seed}, file `inputs/{path.name}`")
        samples = np.array([[t.encode()] for t in texts], dtype=object)
        return PreparedInputs(name, kind, str(path), samples, "BYTES", text)
    onnx_path = opts.config.parent / model / "1" / "model.onnx"
    if brought and onnx_path.is_file():
        data, text = gen.synthetic_input_data(model_config, onnx_path, opts.seed)
        path = gen.write_input_data(out_dir / f"{model}.json", data)
        return PreparedInputs("", "synthetic", str(path), None, "", f"{text}, file `inputs/{path.name}`")
    return PreparedInputs("", "random", "random", None, "", "perf_analyzer random data (model inputs not recognised)")


def knee_of(records: Sequence[PerfRecord]) -> KneeResult | None:
    points = [LoadPoint(r.load, r.throughput, r.p99_ms) for r in records
              if r.status != "failed" and r.throughput > 0 and r.p99_ms > 0]
    return find_knee(points) if len(points) >= 2 else None


def past_the_knee(records: Sequence[PerfRecord], confirm_levels: int = 3) -> str | None:
    """Stop a sweep once its knee lies `confirm_levels` measured levels behind the last one:
    higher load would only add queueing (and minutes) to the run. Three, not two: the served digit
    classifier measured 2,344 / 2,206 / 2,434 / 4,049 infer/s at c = 4 / 8 / 16 / 32 (peers run of
    2026-12-04 16:35, a second instance and a borrowed core joining in), and a stop two levels past
    the apparent knee at c=4 reported a peak 40% low, which the Poisson rates and A/B derive from."""
    knee = knee_of(records)
    if knee is None or not knee.reached:
        return None
    behind = sum(1 for r in records if r.status != "failed" and r.load > knee.knee.load)
    return f"the knee (load {knee.knee.load:g}) is {behind} levels behind" if behind >= confirm_levels else None


def measured_peak(knee: KneeResult | None, records: Sequence[PerfRecord]) -> dict[str, float] | None:
    """The best measured level (load, throughput, P99), also from a sweep of one level (no knee to
    find there, but a measured peak: the A/B block and isolation plan their loads from it, and
    without it they used a made-up 100 infer/s labelled "80% of the served peak")."""
    if knee is not None:
        return knee.peak.__dict__
    good = [r for r in records if r.status != "failed" and r.throughput > 0 and r.p99_ms > 0]
    best = max(good, key=lambda r: r.throughput, default=None)
    return LoadPoint(best.load, best.throughput, best.p99_ms).__dict__ if best else None


def describe_knee(knee: KneeResult | None, records: Sequence[PerfRecord], mode: LoadMode) -> str:
    unit = "concurrency" if mode is LoadMode.CONCURRENCY else "Poisson rate"
    failed = [r for r in records if r.status == "failed"]
    tail = f" The next level ({unit} {failed[0].load:g}) failed: {failed[0].note}." if failed else ""
    if knee is None:
        return "fewer than 2 measured levels: no knee." + tail
    if not knee.reached:
        return (f"not reached up to {unit} {knee.points[-1].load:g}; peak {knee.peak.throughput:.1f} infer/s "
                f"(P99 {knee.peak.p99_ms:.1f} ms) is a lower bound of capacity. Rule: {knee.rule}." + tail)
    k = knee.knee
    load = knee.recommended_load
    load_text = f"{max(1, math.floor(load))}" if mode is LoadMode.CONCURRENCY else f"{load:.0f} req/s"
    return (f"{unit} {k.load:g} ({k.throughput:.1f} infer/s, P99 {k.p99_ms:.1f} ms). Recommended: run at "
            f"{knee.operating_fraction:.0%} of it, i.e. {knee.recommended_throughput:.0f} infer/s ({unit} {load_text}), "
            f"expected P99 ~{knee.expected_p99_ms:.1f} ms. Rule: {knee.rule}." + tail)


Progress = Callable[[str], None]


def run_served_sweeps(endpoint: Endpoint, variant: str, prepared: PreparedInputs, opts: CampaignOptions,
                      folder: RunFolder, progress: Progress) -> tuple[list[PerfRecord], dict[str, Any]]:
    """Concurrency sweep, then a Poisson sweep around the peak the first one measured."""
    common = dict(model=endpoint.model, url=endpoint.grpc_url, input_data=prepared.path,
                  measurement=opts.measurement, metrics_url=endpoint.metrics_url, variant=variant)
    conc = SweepSpec(name=f"{endpoint.model}.concurrency", levels=concurrency_levels(opts.max_concurrency), **common)
    records, _ = run_sweep(conc, folder, progress, stop_when=past_the_knee)
    knees: dict[str, Any] = {}
    knee = knee_of(records)
    knees[conc.name] = {"text": describe_knee(knee, records, LoadMode.CONCURRENCY),
                        "knee": knee.knee.__dict__ if knee and knee.knee else None,
                        "peak": measured_peak(knee, records)}
    if knee is None:
        return records, knees
    rate = SweepSpec(name=f"{endpoint.model}.poisson", mode=LoadMode.REQUEST_RATE,
                     levels=request_rate_levels(knee.peak.throughput, opts.rate_fractions), **common)
    rate_records, _ = run_sweep(rate, folder, progress)
    rate_knee = knee_of(rate_records)
    knees[rate.name] = {"text": describe_knee(rate_knee, rate_records, LoadMode.REQUEST_RATE),
                        "knee": rate_knee.knee.__dict__ if rate_knee and rate_knee.knee else None,
                        "peak": measured_peak(rate_knee, rate_records)}
    return records + rate_records, knees


def _isolation(spec, endpoints, prepared_by_model, results, opts, folder, progress) -> list[PerfRecord]:
    """Partitioned vs shared for the A/B model and a neighbour of another partition with the same inputs."""
    from perf_sweep.isolation import run_isolation_ab
    from perf_sweep.plan import find_perf_analyzer, perf_analyzer_environment

    main_ep = next(e for e in endpoints if e.model == opts.ab_model)
    main_in = prepared_by_model[opts.ab_model]
    neighbours = [e for e in endpoints if e.server != main_ep.server and e.model in prepared_by_model
                  and (prepared_by_model[e.model].kind, prepared_by_model[e.model].input_name) == (main_in.kind, main_in.input_name)]
    if main_in.samples is None or not neighbours:
        among = "this run measures (--models)" if opts.models else "is served"
        results["skipped"].append(
            f"partitioned vs shared: no model with {opts.ab_model}'s inputs that {among} runs in another partition "
            f"than `{main_ep.server}` (the measured models' partitions: {sorted({e.server for e in endpoints})}).")
        return []
    knee = results["knees"].get(f"{opts.ab_model}.concurrency", {})
    basis = knee.get("knee") or knee.get("peak") or {"throughput": 100.0}
    outcome = run_isolation_ab(spec, main_ep, neighbours[0], main_in, round(0.8 * basis["throughput"], 1), opts,
                               folder, progress, find_perf_analyzer(), perf_analyzer_environment())
    if "skipped" in outcome:
        results["skipped"].append(outcome["skipped"])
        return []
    results["headlines"].append(outcome["headline"])
    return outcome["records"]


def plan_text_limit(endpoint: Endpoint, config: Mapping[str, Any], served: Sequence[Endpoint], opts: CampaignOptions):
    """(pipeline, where the encoder is served) for a fused text model or a tokenizer -> encoder
    ensemble, from the served configs."""
    from perf_sweep.text_limit import plan_fused_text_pipeline, plan_text_pipeline

    if is_fused_text_model(config):
        return plan_fused_text_pipeline(config, opts.config.parent), endpoint
    steps = {s["model_name"]: fetch_model_config(endpoint.http_url, s["model_name"])
             for s in config["ensemble_scheduling"]["step"]}
    pipeline = plan_text_pipeline(config, steps, opts.config.parent)
    return pipeline, next((e for e in served if e.model == pipeline.encoder_model), endpoint)


def _measure_text_limit(pipeline, where: Endpoint, prepared: PreparedInputs, when: str, progress: Progress):
    from perf_sweep.limits import describe_pinning
    from perf_sweep.text_limit import decode_texts, measure_text_limit

    threads = pipeline.intra_op_threads(where.intra_op_threads)
    progress(f"[perf] in-process limit ({pipeline.tokenizer_model} -> {pipeline.encoder_model} as served, "
             f"{describe_pinning(where.limit_cpus, threads, where.server)}), {when}")
    points = measure_text_limit(pipeline, decode_texts(prepared.samples), where.intra_op_threads, where.limit_cpus)
    progress(f"[perf] in-process limit {when}: " + ", ".join(f"batch {p.batch_size}: {p.throughput:.0f} texts/s" for p in points))
    return points


def limit_headlines(results: Mapping[str, Any], records: Sequence[PerfRecord], ab_model: str | None) -> list[str]:
    """Every model's served throughput vs its in-process limit (the digit model's from the A/B
    block, each text ensemble's from `limits`), for the top of the headlines."""
    from perf_sweep.limits import LimitPoint, served_vs_limit_headlines

    lines = []
    knees = results.get("knees", {})
    digit = (results.get("limit") or {}).get("best")
    if digit and ab_model:
        rows = [r for r in records if r.model == ab_model or r.model.startswith(f"{ab_model}_ab_")]
        lines += served_vs_limit_headlines(ab_model, knees.get(f"{ab_model}.concurrency"), rows, LimitPoint(**digit))
    for model, entry in sorted((results.get("limits") or {}).items()):
        rows = [r for r in records if r.model == model]
        lines += served_vs_limit_headlines(model, knees.get(f"{model}.concurrency"), rows, LimitPoint(**entry["best"]),
                                           entry.get("unit", "items/s"), entry.get("what", ""))
    return lines


def host_description() -> str:
    """The machine and the code a run measured: the CPU (model, SIMD flags: they decide how fast INT8
    runs), the usable CPUs, the load average, the commit. It said "vm, x86_64, 2 CPUs usable" and no
    commit, so a report could not be placed beside another (a review, 2026-12-07)."""
    from contracts.devices import read_cpu_info
    from perf_sweep.peers.machine import source_revision

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{read_cpu_info().describe(cpus)}, {platform.machine()}, kernel {platform.release()}; "
            f"commit {source_revision()}; load average {os.getloadavg()[0]:.2f} at start")


def _selected_endpoints(opts: CampaignOptions):
    from contracts.manifest import read_manifest

    endpoints = served = endpoints_from_manifest(read_manifest(opts.manifest))
    if opts.models:
        unknown = set(opts.models) - {e.model for e in endpoints}
        if unknown:
            raise SweepPlanError(f"models {sorted(unknown)} are not served (manifest has {[e.model for e in endpoints]}).")
        endpoints = tuple(e for e in endpoints if e.model in opts.models)
    if opts.ab_model is not None and opts.ab_model not in {e.model for e in served}:
        # checked before anything is measured: a typo ran the whole sweep, then listed the A/B block as not measured
        raise SweepPlanError(f"A/B model {opts.ab_model!r} is not served (manifest has "
                             f"{sorted(e.model for e in served)}): name one of them, or --no-ab.")
    return endpoints, served


def _skip_reason(endpoint, config: Mapping[str, Any], steps) -> str | None:
    if endpoint.model in steps:
        return f"{endpoint.model}: a step of an ensemble, measured through the ensemble."
    if (config.get("model_transaction_policy") or {}).get("decoupled"):
        return (f"{endpoint.model}: a decoupled generation model (tokens stream out), measured by "
                "`make perf-generate`, not perf_analyzer request sweeps.")
    return None


def _text_limit_plan(endpoint, config, served, prepared, opts, results, progress):
    """(pipeline, encoder endpoint) of a text model's in-process limit, or None (reason in `skipped`)."""
    if prepared.kind != "text" or not opts.text_limit:
        return None
    if not (config.get("ensemble_scheduling") or is_fused_text_model(config)):
        results["skipped"].append(f"in-process limit of {endpoint.model}: neither a fused text model nor a "
                                  "tokenizer -> encoder ensemble.")
        return None
    try:
        return plan_text_limit(endpoint, config, served, opts)
    except (SweepPlanError, SweepRunError) as exc:
        results["skipped"].append(f"in-process limit of {endpoint.model}: {exc}")
        progress(f"[perf] in-process limit of {endpoint.model} skipped: {exc}")
        return None


def _sweep_model(endpoint, config, spec, served, opts, folder, results, progress) -> tuple[list[PerfRecord], Any]:
    """One served model: its inputs, its sweeps, and (text) its in-process limit before and after them."""
    brought = any(m.name == endpoint.model and m.recipe == "onnx_file" for m in spec.models)
    prepared = prepare_inputs(endpoint.model, config, folder.root / "inputs", opts, text_max_tokens(spec, opts.text_max_tokens),
                              brought)
    if prepared.kind == "random":
        results["skipped"].append(f"{endpoint.model}: inputs not recognised (neither digit images nor one string "
                                  "input); perf_analyzer's random data would not look like production.")
        return [], None
    results["inputs"][endpoint.model] = prepared.description
    variants = {m.name: spec.served_variant(m.name).value for m in spec.models}
    variant = variants.get(endpoint.model, "served")
    text_limit = _text_limit_plan(endpoint, config, served, prepared, opts, results, progress)
    if text_limit:  # an ensemble has no precision of its own: name its encoder's
        variant = f"{text_limit[0].encoder_model} {variants.get(text_limit[0].encoder_model, 'served')}"
    progress(f"[perf] {endpoint.model} ({variant}) on {endpoint.grpc_url}: {prepared.description}")
    before = _measure_text_limit(*text_limit, prepared, "before the sweeps", progress) if text_limit else None
    model_records, knees = run_served_sweeps(endpoint, variant, prepared, opts, folder, progress)
    results["knees"].update(knees)
    if text_limit:
        from perf_sweep.text_limit import text_limit_entry

        after = _measure_text_limit(*text_limit, prepared, "after the sweeps", progress)
        results["limits"][endpoint.model] = text_limit_entry(
            *text_limit, variants.get(text_limit[0].encoder_model, "served"), len(prepared.samples),
            {"before the sweeps": before, "after the sweeps": after}, opts.config.parent.parent)
    return model_records, prepared


def _ab_and_isolation(spec, endpoints, prepared_by_model, opts, folder, results, progress) -> tuple[list[PerfRecord], dict]:
    if opts.ab_model is None:
        results["skipped"].append("A/B block: not run (--no-ab).")
        return [], {}
    if opts.ab_model not in prepared_by_model:
        why = ("was not selected (--models)" if opts.models and opts.ab_model not in opts.models
               else "had no inputs this run could send (see above)")
        results["skipped"].append(f"A/B block: model {opts.ab_model!r} {why}.")
        return [], {}
    kind = prepared_by_model[opts.ab_model].kind
    if kind != "image":
        # its in-process limit feeds the requests' samples to the ONNX graph, which for a text model
        # takes token ids, not the TEXT its requests carry (it raised ValueError from ONNX Runtime)
        why = ("takes text requests, which its ONNX graph does not take as they are (it tokenizes in the backend)"
               if kind == "text" else f"has only {kind} inputs here, which would not look like production")
        results["skipped"].append(
            f"A/B block: model {opts.ab_model!r} {why}; the A/B block measures a model whose requests are its graph's "
            f"input (--ab-model digit_classifier); text models against the alternatives: `make perf-peers`.")
        return [], {}
    from perf_sweep.ab import run_ab_block

    main_knee = results["knees"].get(f"{opts.ab_model}.concurrency", {})
    endpoint = next(e for e in endpoints if e.model == opts.ab_model)
    ab = run_ab_block(spec, endpoint, prepared_by_model[opts.ab_model], main_knee, opts, folder, progress)
    results.update(ab.results)
    results["skipped"] += ab.skipped
    results["headlines"] += ab.headlines
    return ab.records + _isolation(spec, endpoints, prepared_by_model, results, opts, folder, progress), ab.cdf_samples


def run_campaign(opts: CampaignOptions, progress: Progress = print) -> Path:
    """Every served model's sweeps, the A/B block, isolation, peers; results.json, report.md, plots."""
    from contracts.serving_spec import load_serving_spec

    spec = load_serving_spec(opts.config)
    endpoints, served = _selected_endpoints(opts)
    folder = RunFolder(unused_folder(opts.out_root / opts.run_id))
    progress(f"[perf] run folder: {folder.root}")
    results: dict[str, Any] = {"run_id": folder.root.name, "command": opts.command, "host": host_description(),
                               "records": [], "knees": {}, "inputs": {}, "skipped": [], "headlines": [], "limits": {}}
    records: list[PerfRecord] = []
    prepared_by_model: dict[str, PreparedInputs] = {}
    configs = {e.model: fetch_model_config(e.http_url, e.model) for e in endpoints}
    steps = ensemble_steps(configs.values())
    for endpoint in endpoints:
        reason = _skip_reason(endpoint, configs[endpoint.model], steps)
        if reason:
            results["skipped"].append(reason)
            continue
        model_records, prepared = _sweep_model(endpoint, configs[endpoint.model], spec, served, opts, folder, results, progress)
        records += model_records
        if prepared is not None:
            prepared_by_model[endpoint.model] = prepared
    ab_records, cdf = _ab_and_isolation(spec, endpoints, prepared_by_model, opts, folder, results, progress)
    records += ab_records
    results["headlines"] = limit_headlines(results, records, opts.ab_model) + results["headlines"]
    if opts.peers:
        from perf_sweep.peers.suite import campaign_peer_section

        results["peers"] = campaign_peer_section(opts.config, opts.manifest, folder.root / "peers", opts.peers_quick,
                                                 opts.seed, progress, models=opts.models)
        results["skipped"] += [results["peers"]["skipped"]] if "skipped" in results["peers"] else []
    results["records"] = [r.as_dict() for r in records]
    results["host"] += f", {os.getloadavg()[0]:.2f} at end"
    typed = PerfRunResults.from_dict(results, "this run's results")  # checked as `perf_sweep report` will read it
    write_perf_results(folder.root, typed)
    from perf_sweep.report import write_latency_samples, write_report

    write_latency_samples(folder.root, cdf)

    report = write_report(folder.root, typed, cdf)
    progress(f"[perf] report: {report}")
    return report
