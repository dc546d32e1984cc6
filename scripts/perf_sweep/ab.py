"""The A/B block of a run, all on one temporary server so every variant is measured alike:

1. dynamic batching vs no batching (perf_analyzer, closed loop, concurrency 1 and 16);
2. dynamic vs none vs client-side static batching at a sparse and a high Poisson load (the
   open-loop client: static batching's wait-to-fill counts in each item's latency);
3. the batching-delay window sweep at the recommended operating rate -> `choose_max_queue_delay`;
4. INT8 vs FP32 when the build produced an INT8 file;
5. the priority mix: realtime (perf_analyzer, `--request-parameter priority:1:int`) alone, then
   under a saturating batch stream (priority 2, open-loop client, rejections counted);
6. the in-process ONNX Runtime limit at its best batch size (measured first; perf_sweep.limits);
7. the batcher candidates: configurations WITH priority levels and queue policies (instances, delay
   window, preferred sizes) against the plain batcher (no window, no policies) at concurrency 16,
   each with its count of requests over STALL_MS (docs/triton-batcher-stall.md).

Every measurement is chosen from a variant's typed `role` (perf_sweep.variants.VariantRole).
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from contracts.model_config import read_model_config
from perf_sweep import loadgen
from perf_sweep.errors import SweepRunError
from perf_sweep.knee import DelayPoint, choose_max_queue_delay
from perf_sweep.limits import best_point, describe_pinning, measure_in_process_limit
from perf_sweep.plan import (
    LoadMode,
    RequestParameter,
    SweepSpec,
    find_perf_analyzer,
    perf_analyzer_environment,
    render_perf_analyzer_command,
)
from perf_sweep.results import STALL_TEXT, PerfRecord, server_metrics_delta
from perf_sweep.runner import RunFolder, run_level, run_sweep, scrape_metrics
from perf_sweep.variants import (
    DEFAULT_CANDIDATES, ServedVariant, VariantRole, plan_variants, start_variant_server, variants_by_role,
    write_variant_repository,
)

Progress = Callable[[str], None]


@dataclass
class AbOutcome:
    records: list[PerfRecord] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    headlines: list[str] = field(default_factory=list)
    cdf_samples: dict[str, list[float]] = field(default_factory=dict)


def extra_variant_files(artifacts: Path, model: str) -> dict[str, Path]:
    """Built variants other than the served one (e.g. int8_mixed), from artifacts/<model>/build.json."""
    from contracts.build_record import BuildRecordError, read_build_record
    from contracts.serving_spec import Variant  # only precisions the CPU path serves (not e.g. GPU-only graphs)

    try:
        record = read_build_record(artifacts / model)
    except BuildRecordError:
        return {}
    return {label: path for label, path in record.variant_files(artifacts / model).items()
            if label in {x.value for x in Variant} and path.name != record.served_file}


def _ok(record: PerfRecord | None) -> bool:
    return record is not None and record.status != "failed"


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


STALLED_REQUESTS = f"requests {STALL_TEXT}"
#: The issue's bar for the served configuration: >= this fraction of the plain batcher's throughput at c=16.
CANDIDATE_THROUGHPUT_FLOOR = 0.9


#: The served peak (infer/s) the A/B loads are planned from when the served sweep measured no level at all.
ASSUMED_PEAK = 100.0


@dataclass(frozen=True)
class AbContext:
    """What every measurement of one A/B block shares: the server, the inputs, the load settings."""

    spec: Any
    model: str
    prepared: Any
    opts: Any
    folder: RunFolder
    progress: Progress
    variants: tuple[ServedVariant, ...]
    binary: Path
    env: Mapping[str, str]
    common: Mapping[str, Any]
    limit: float
    peak: float
    knee: Mapping[str, Any] | None
    #: False: the served sweep measured no level, and `peak` is ASSUMED_PEAK (the report says so)
    peak_measured: bool = True

    @property
    def operating_rate(self) -> float:
        return round(0.8 * (self.knee["throughput"] if self.knee else self.peak), 1)

    def one(self, role: VariantRole) -> ServedVariant | None:
        return next(iter(variants_by_role(self.variants, role)), None)


def run_ab_block(spec, endpoint, prepared, main_knee: Mapping[str, Any], opts, folder: RunFolder,
                 progress: Progress) -> AbOutcome:
    """Everything above for `endpoint.model`, pinned like its partition (same CPU set and threads)."""
    out = AbOutcome()
    model = endpoint.model
    if prepared.samples is None:
        out.skipped.append(f"A/B block: {model} has no inputs the A/B's in-process limit and Python load can send "
                           f"({prepared.description}), nothing to compare.")
        return out
    onnx = opts.config.parent / model / "1" / "model.onnx"
    pinning = describe_pinning(endpoint.cpus, endpoint.intra_op_threads, endpoint.server)
    best = _in_process_limit(out, onnx, prepared, endpoint, opts, progress)
    extra = extra_variant_files(opts.artifacts, model)
    if not extra:
        out.skipped.append(f"INT8-mixed vs FP32: no other CPU precision of {model} in {opts.artifacts / model}/build.json.")
    candidates = getattr(opts, "batcher_candidates", DEFAULT_CANDIDATES)
    served_max_batch = read_model_config(onnx.parent.parent).max_batch_size
    variants = plan_variants(spec, model, onnx, opts.static_batch, opts.delays_ms, extra, candidates,
                             served_max_batch_size=served_max_batch)
    repo = write_variant_repository(spec, model, variants, folder.root / "ab_repository", served_dir=onnx.parent.parent)
    progress(f"[perf] A/B: starting a temporary tritonserver with {len(variants)} variants of {model} ({pinning})")
    try:
        process, _http, grpc, metrics = start_variant_server(
            repo, folder.root / "ab_server", [v.served_name for v in variants], endpoint.cpus, endpoint.intra_op_threads,
            max_input_bytes=spec.server.max_input_bytes)
    except SweepRunError as exc:
        out.skipped.append(f"A/B block: {exc}".splitlines()[0])
        progress(f"[perf] A/B block skipped: {exc}")
        return out
    out.results["ab_notes"] = [f"Temporary server {pinning}; variants: " + ", ".join(map(_describe_variant, variants)) + "."]
    measured_peak = (main_knee.get("peak") or {}).get("throughput")
    ctx = AbContext(spec, model, prepared, opts, folder, progress, variants, find_perf_analyzer(), perf_analyzer_environment(),
                    dict(url=grpc, input_data=prepared.path, measurement=opts.measurement, metrics_url=metrics),
                    best.throughput, measured_peak or ASSUMED_PEAK, main_knee.get("knee"), peak_measured=bool(measured_peak))
    try:
        _measure(out, ctx)
    finally:
        process.stop()
        shutil.copy2(process.log_path, folder.root / "tritonserver-ab.log")
    return out


def _describe_variant(v: ServedVariant) -> str:
    extra = [f"{v.instance_count} instances"] if v.instance_count else []
    extra += [f"preferred {list(v.preferred_batch_sizes)}"] if v.preferred_batch_sizes else []
    extra += [] if v.queue_policies else ["no priority levels or queue policies"]
    return (f"{v.label} (max_batch_size {v.max_batch_size}, delay {v.max_queue_delay_microseconds} us"
            + "".join(f", {e}" for e in extra) + ")")


def _in_process_limit(out: AbOutcome, onnx: Path, prepared, endpoint, opts, progress: Progress):
    """Step 6, measured first: the in-process ONNX Runtime limit (the ceiling every served figure is held to)."""
    # pinned like the A/B server (the home cores): the block holds its own figures against this limit
    pinning = describe_pinning(endpoint.cpus, endpoint.intra_op_threads, endpoint.server)
    progress(f"[perf] in-process ONNX Runtime limit of {endpoint.model} ({pinning})")
    points = measure_in_process_limit(onnx, prepared.samples, prepared.input_name,
                                      intra_op_threads=endpoint.intra_op_threads, cpus=endpoint.cpus)
    best = best_point(points)
    # The served-vs-limit headlines are written by the campaign (perf_sweep.limits.served_vs_limit_headlines).
    out.results["limit"] = {
        "text": (f"`{onnx.relative_to(opts.config.parent.parent)}` in ONNX Runtime in this process, {pinning}: "
                 f"best {best.throughput:.0f} items/s at batch {best.batch_size}."),
        "points": [p.__dict__ for p in points], "best": best.__dict__,
    }
    return best


def _measure(out: AbOutcome, ctx: AbContext) -> None:
    at16 = _closed_loop(out, ctx)
    _batching_headlines(out, ctx, at16)
    _candidate_headlines(out, ctx, at16)
    _open_loop(out, ctx)
    _delay_sweep(out, ctx)
    _priority_mix(out, ctx)


def _closed_loop(out: AbOutcome, ctx: AbContext) -> dict[str, PerfRecord | None]:
    """Steps 1 and 7: every closed-loop variant at concurrency 1 and 16; returns label -> record at 16."""
    at16: dict[str, PerfRecord | None] = {}
    for v in ctx.variants:
        if not v.role.closed_loop:
            continue
        sweep = SweepSpec(name=f"ab.{v.label}.concurrency", model=v.served_name, levels=(1, 16), variant=v.label, **ctx.common)
        records, _ = run_sweep(sweep, ctx.folder, ctx.progress, ctx.binary, ctx.env, stop_after_failure=False)
        out.records += records
        at16[v.label] = next((r for r in records if r.load == 16), None)
    return at16


def _record(ctx: AbContext, at16: Mapping[str, PerfRecord | None], role: VariantRole) -> PerfRecord | None:
    v = ctx.one(role)
    return at16.get(v.label) if v else None


def _batching_headlines(out: AbOutcome, ctx: AbContext, at16: Mapping[str, PerfRecord | None]) -> None:
    R = VariantRole
    d, n = _record(ctx, at16, R.SERVED), _record(ctx, at16, R.NO_BATCHING)
    if _ok(d) and _ok(n):
        out.headlines.append(
            f"Dynamic batching vs none at concurrency 16: {d.throughput:.0f} vs {n.throughput:.0f} infer/s = "
            f"{_ratio(d.throughput, n.throughput):.2f}x [target >= 2x]; P99 {d.p99_ms:.1f} vs {n.p99_ms:.1f} ms; "
            f"{STALLED_REQUESTS} (Triton's batcher stall, docs/triton-batcher-stall.md): {d.stalled} vs {n.stalled}.")
    elif d and n:
        out.headlines.append(
            f"Dynamic batching vs none at concurrency 16 [target >= 2x]: dynamic "
            f"{'%.0f infer/s' % d.throughput if _ok(d) else 'FAILED (' + d.note + ')'}; no batching "
            f"{'%.0f infer/s' % n.throughput if _ok(n) else 'FAILED (' + n.note + ')'}.")
    plain_d, plain_n, plain = (_record(ctx, at16, r) for r in (R.NO_POLICY, R.NO_BATCHING_NO_POLICY, R.PLAIN))
    if _ok(plain_d) and _ok(plain_n):
        out.headlines.append(
            f"Dynamic batching vs none at concurrency 16, both without priority levels or queue policies: "
            f"{plain_d.throughput:.0f} vs {plain_n.throughput:.0f} infer/s = {_ratio(plain_d.throughput, plain_n.throughput):.2f}x; "
            f"P99 {plain_d.p99_ms:.1f} vs {plain_n.p99_ms:.1f} ms; {STALLED_REQUESTS}: {plain_d.stalled} vs {plain_n.stalled}.")
    if _ok(plain) and _ok(plain_n):
        out.headlines.append(
            f"Dynamic batching with no delay window vs none at concurrency 16, both without priority levels or "
            f"queue policies: {plain.throughput:.0f} vs {plain_n.throughput:.0f} infer/s = "
            f"{_ratio(plain.throughput, plain_n.throughput):.2f}x (avg batch "
            f"{(plain.server or {}).get('avg_batch_size', float('nan')):.1f}); P99 {plain.p99_ms:.1f} vs {plain_n.p99_ms:.1f} ms.")
    if _ok(d) and _ok(plain_d):
        out.headlines.append(
            f"Priority levels + queue policies cost (same delay, concurrency 16): P99 {d.p99_ms:.1f} ms with vs "
            f"{plain_d.p99_ms:.1f} ms without; {d.throughput:.0f} vs {plain_d.throughput:.0f} infer/s; "
            f"{STALLED_REQUESTS}: {d.stalled} vs {plain_d.stalled}.")
    for v in variants_by_role(ctx.variants, R.PRECISION):
        record = at16.get(v.label)
        if _ok(record) and _ok(d):
            out.headlines.append(f"Precision: {v.label} vs the served {ctx.spec.model(ctx.model).variant.value} (same server, "
                                 f"same batching) at concurrency 16: {record.throughput:.0f} vs {d.throughput:.0f} infer/s "
                                 f"({_ratio(record.throughput, d.throughput):.2f}x), P99 {record.p99_ms:.1f} vs {d.p99_ms:.1f} ms.")


def candidate_rows(variants: tuple[ServedVariant, ...], at16: Mapping[str, PerfRecord | None],
                   records: list[PerfRecord]) -> tuple[list[dict[str, Any]], PerfRecord | None]:
    """One row per configuration with priorities and policies (the served one and each candidate):
    throughput vs the plain batcher at c=16, P99, stalls and requests over both concurrencies (pure)."""
    plain_variant = next((v for v in variants if v.role is VariantRole.PLAIN), None)
    plain = at16.get(plain_variant.label) if plain_variant else None
    rows = []
    for v in variants:
        if v.role not in (VariantRole.SERVED, VariantRole.CANDIDATE):
            continue
        mine = [r for r in records if r.variant == v.label and r.status != "failed"]
        record = at16.get(v.label)
        ratio = _ratio(record.throughput, plain.throughput) if _ok(record) and _ok(plain) else float("nan")
        rows.append({"variant": v.label, "served": v.role is VariantRole.SERVED, "instances": v.instance_count,
                     "delay_us": v.max_queue_delay_microseconds, "preferred": list(v.preferred_batch_sizes),
                     "throughput_c16": record.throughput if _ok(record) else None, "p99_ms_c16": record.p99_ms if _ok(record) else None,
                     "vs_plain": ratio, "requests": sum(r.requests for r in mine), "stalled": sum(r.stalled for r in mine),
                     "meets": ratio >= CANDIDATE_THROUGHPUT_FLOOR and sum(r.stalled for r in mine) == 0})
    return rows, plain


def _candidate_headlines(out: AbOutcome, ctx: AbContext, at16: Mapping[str, PerfRecord | None]) -> None:
    rows, plain = candidate_rows(ctx.variants, at16, out.records)
    if not rows or not _ok(plain):
        out.skipped.append("batcher candidates: the plain batcher (no window, no policies) did not measure at c=16.")
        return
    table = [f"| configuration (priorities + queue policies on) | infer/s c=16 | x plain | P99 ms | requests | {STALLED_REQUESTS} |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        name = r["variant"] + (" (served)" if r["served"] else "")
        tput = f"{r['throughput_c16']:.0f}" if r["throughput_c16"] else "failed"
        p99 = f"{r['p99_ms_c16']:.1f}" if r["p99_ms_c16"] else "-"
        table.append(f"| {name} | {tput} | {r['vs_plain']:.2f} | {p99} | {r['requests']} | {r['stalled']} |")
    total = sum(r.requests for r in out.records if r.status != "failed")
    stalls = sum(r.stalled for r in out.records if r.status != "failed")
    out.results["candidates"] = {"rows": rows, "plain_c16": plain.throughput, "table": "\n".join(table),
                                 "requests_all_closed_loop": total, "stalled_all_closed_loop": stalls}
    served = next(r for r in rows if r["served"])
    best = max(rows, key=lambda r: (r["meets"], r["vs_plain"] if r["vs_plain"] == r["vs_plain"] else -1))
    out.headlines.append(
        f"Batcher candidates (priorities and queue policies on) vs the plain batcher ({plain.throughput:.0f} infer/s at c=16): "
        f"served {served['vs_plain']:.2f}x with {served['stalled']} stalls [target >= {CANDIDATE_THROUGHPUT_FLOOR}x, 0 stalls]; "
        f"best {best['variant']} {best['vs_plain']:.2f}x; {total} closed-loop requests in this block, {stalls} {STALLED_REQUESTS}.")


def _open_loop(out: AbOutcome, ctx: AbContext) -> None:
    """Step 2: dynamic vs none vs static, open loop at sparse and high load (same client for all three)."""
    served, none, static = (ctx.one(r) for r in (VariantRole.SERVED, VariantRole.NO_BATCHING, VariantRole.STATIC))
    rows = []
    for load_name, rate in (("sparse", ctx.opts.sparse_rate), ("high", ctx.operating_rate)):
        for v in (served, none, static):
            is_static = v.role is VariantRole.STATIC
            stream = loadgen.Stream(v.label, rate, batch_size=v.max_batch_size if is_static else 1, static_batching=is_static)
            planned = loadgen.plan_requests([stream], ctx.opts.loadgen_seconds, seed=ctx.opts.seed)
            outcomes = loadgen.run_open_loop(ctx.common["url"], v.served_name, ctx.prepared.input_name, ctx.prepared.samples,
                                             ctx.prepared.datatype, planned)
            summary, _ = loadgen.summarize(outcomes, v.label, ctx.opts.loadgen_seconds)
            rows.append({"experiment": f"{load_name} load", "variant": v.label, "load": f"{rate:g} items/s",
                         "streams": [summary.__dict__]})
            ctx.progress(f"[perf] ab.openloop {load_name} {rate:g}/s {v.label}: {summary.throughput:.1f} items/s "
                         f"p50 {summary.p50_ms:.1f} p99 {summary.p99_ms:.1f} ms, errors {summary.rejected + summary.other_errors}")
    out.results["loadgen"] = rows
    _field_report_check(out, rows, served.label, none.label, static.label)


def _delay_sweep(out: AbOutcome, ctx: AbContext) -> None:
    """Step 3: the batching-delay window sweep at the recommended operating rate."""
    points, rate = [], ctx.operating_rate
    for v in variants_by_role(ctx.variants, VariantRole.DELAY):
        sweep = SweepSpec(name=f"ab.{v.label}.poisson", model=v.served_name, mode=LoadMode.REQUEST_RATE,
                          levels=(rate,), variant=v.label, **ctx.common)
        records, _ = run_sweep(sweep, ctx.folder, ctx.progress, ctx.binary, ctx.env)
        out.records += records
        if _ok(records[0]):
            points.append(DelayPoint(v.max_queue_delay_microseconds, records[0].throughput, records[0].p99_ms))
    if not points:
        return
    choice = choose_max_queue_delay(points)
    table = ["| max_queue_delay | infer/s | P99 ms |", "|---:|---:|---:|"]
    table += [f"| {p.delay_us / 1000:g} ms | {p.throughput:.1f} | {p.p99_ms:.2f} |" for p in choice.points]
    basis = ("knee" if ctx.knee else "peak; knee not reached") if ctx.peak_measured else \
        f"peak, taken as {ASSUMED_PEAK:g} infer/s: the served sweep measured no level"
    text = (f"Poisson load at {rate:g} req/s (80% of the served {basis}). Chosen: **{choice.chosen.delay_us} us** "
            f"({choice.rule}).\n\n" + "\n".join(table))
    if ctx.opts.write_back:
        from perf_sweep.writeback import write_queue_delay

        write_queue_delay(ctx.opts.config, ctx.model, choice.chosen.delay_us)
        text += f"\n\nWritten back to `{ctx.opts.config.name}` as [models.{ctx.model}] max_queue_delay_microseconds."
    else:
        text += f"\n\nTo apply: `python -m perf_sweep write-back --model {ctx.model} --delay-us {choice.chosen.delay_us}`."
    out.results["delay"] = {"text": text, "chosen_us": choice.chosen.delay_us}
    out.headlines.append(f"Recommended max_queue_delay for {ctx.model}: {choice.chosen.delay_us} us (delay sweep at {rate:g} req/s).")


def _field_report_check(out: AbOutcome, rows, served_label: str, none_label: str, static_label: str) -> None:
    def get(load, label):
        return next(r["streams"][0] for r in rows if r["experiment"] == f"{load} load" and r["variant"] == label)

    for load in ("sparse", "high"):
        d, s, n = get(load, served_label), get(load, static_label), get(load, none_label)
        out.results.setdefault("ab_notes", []).append(
            f"{load} load: dynamic P99 {d['p99_ms']:.1f} ms vs static {s['p99_ms']:.1f} ms "
            f"({1 - _ratio(d['p99_ms'], s['p99_ms']):.0%} lower) and {d['throughput']:.1f} vs {s['throughput']:.1f} items/s; "
            f"no batching P99 {n['p99_ms']:.1f} ms, {n['throughput']:.1f} items/s, "
            f"{n['rejected'] + n['other_errors']} errors.")
    d, s = get("sparse", served_label), get("sparse", static_label)
    out.headlines.append(
        f"Field-report check at sparse load (claim: dynamic cuts P99 by 60% and adds 15% throughput over static "
        f"batching): dynamic P99 {d['p99_ms']:.1f} ms vs {static_label} {s['p99_ms']:.1f} ms = "
        f"{1 - _ratio(d['p99_ms'], s['p99_ms']):.0%} lower; items/s {_ratio(d['throughput'], s['throughput']) - 1:+.0%} "
        f"(open loop: both carry the offered load, static's shortfall is items left in an unfilled batch when the "
        f"window closed).")


@dataclass
class _Saturation:
    """What the batch-saturated window measured (step 5)."""

    loaded: PerfRecord
    latencies: list[float]
    served_items: float
    window: Any
    outcomes: list | None = None
    error: str | None = None
    #: realtime measured by the open-loop client, still under the saturation, where perf_analyzer stopped
    client_fallback: Any = None


def _priority_mix(out: AbOutcome, ctx: AbContext) -> None:
    """Step 5: realtime alone, then under a saturating batch stream (rejections counted)."""
    spec, variant = ctx.spec, ctx.one(VariantRole.SERVED)
    if len(spec.priorities) < 2:
        out.skipped.append("priority mix: serving.toml declares fewer than 2 priority levels.")
        return
    # the levels as this model is served (its own queue and request sizes where it sets them)
    top, *_, lowest = sorted(spec.priorities_for(spec.model(ctx.model)), key=lambda p: p.level)
    rt_rate, duration = round(max(5.0, 0.1 * ctx.peak), 1), 8.0
    count = int(rt_rate * duration)
    realtime = SweepSpec(name="ab.priority.realtime", model=variant.served_name, mode=LoadMode.REQUEST_RATE,
                         levels=(rt_rate,), variant=f"{top.name} (priority {top.level})",
                         request_parameters=(RequestParameter("priority", str(top.level)),), **ctx.common)
    unloaded, lat_unloaded = run_level(realtime, rt_rate, ctx.folder, ctx.binary, ctx.env, request_count=count)
    fallback: dict[str, Any] = {}  # realtime measured by the client where perf_analyzer stopped at an error
    if not _ok(unloaded):
        fallback["alone"] = _realtime_by_client(ctx, variant, top, rt_rate, duration)
    items = lowest.max_request_batch_size
    batch = loadgen.Stream(lowest.name, min(200.0, 1.5 * ctx.limit / items), batch_size=items, priority=lowest.level)
    sat = _saturate(ctx, variant, lowest, batch, realtime, rt_rate, count, duration,
                    lambda: _realtime_by_client(ctx, variant, top, rt_rate, duration))
    if sat.client_fallback is not None:
        fallback[f"under {lowest.name} load"] = sat.client_fallback
    out.records += [unloaded, sat.loaded]
    out.cdf_samples[f"{top.name} (priority {top.level}), alone"] = lat_unloaded
    out.cdf_samples[f"{top.name} (priority {top.level}), under {lowest.name} saturation"] = sat.latencies
    _priority_report(out, ctx, top, lowest, batch, rt_rate, count, duration, unloaded, sat, fallback)


def _realtime_by_client(ctx: AbContext, variant: ServedVariant, top, rt_rate: float, duration: float):
    stream = loadgen.Stream(f"{top.name} (client)", rt_rate, priority=top.level)
    outcomes = loadgen.run_open_loop(ctx.common["url"], variant.served_name, ctx.prepared.input_name, ctx.prepared.samples,
                                     ctx.prepared.datatype, loadgen.plan_requests([stream], duration, seed=ctx.opts.seed + 13))
    return loadgen.summarize(outcomes, stream.name, duration)


def _saturate(ctx: AbContext, variant: ServedVariant, lowest, batch, realtime: SweepSpec, rt_rate: float, count: int,
              duration: float, realtime_by_client: Callable[[], Any]) -> _Saturation:
    """Batch work as clients send it (max_request_batch_size items per request) from two sources:
    perf_analyzer keeps 64 such requests in flight (saturates the server; C++ is fast enough), and
    the open-loop client adds Poisson arrivals (capped at 200 requests/s, what Python fires here)
    whose outcomes count the batch priority's rejections. Realtime is measured meanwhile."""
    planned = loadgen.plan_requests([batch], duration + 6.0, seed=ctx.opts.seed + 7)
    common = ctx.common
    saturator = SweepSpec(name="ab.priority.batch_saturator", model=variant.served_name, levels=(64,), batch_size=batch.batch_size,
                          variant=lowest.name, request_parameters=(RequestParameter("priority", str(lowest.level)),),
                          **{**common, "measurement": dataclasses.replace(common["measurement"], max_trials=50)})
    sat_dir = ctx.folder.sweep_dir(saturator)
    sat_argv = render_perf_analyzer_command(saturator, 64, sat_dir / "unused.csv", None, ctx.binary)
    ctx.folder.log_command(sat_argv, ctx.env, "batch saturator (runs in the background; stopped after the realtime measurement)")
    box: dict[str, Any] = {}

    def background():
        try:
            box["outcomes"] = loadgen.run_open_loop(common["url"], variant.served_name, ctx.prepared.input_name,
                                                    ctx.prepared.samples, ctx.prepared.datatype, planned, drain_timeout_s=60)
        except Exception as exc:  # reported below; the realtime measurement stands on its own
            box["error"] = str(exc)

    with open(sat_dir / "saturator.stdout.txt", "w") as sat_log:
        sat_proc = subprocess.Popen(sat_argv, env=dict(ctx.env), stdout=sat_log, stderr=subprocess.STDOUT)
        thread = threading.Thread(target=background, daemon=True)
        thread.start()
        time.sleep(2.0)  # let the batch queue fill before measuring realtime
        before, started = scrape_metrics(common["metrics_url"]), time.monotonic()
        loaded, latencies = run_level(dataclasses.replace(realtime, name="ab.priority.realtime_under_batch"), rt_rate,
                                      ctx.folder, ctx.binary, ctx.env, request_count=count)
        window = server_metrics_delta(before, scrape_metrics(common["metrics_url"]), variant.served_name)
        served_items = window.inferences / (time.monotonic() - started)
        client_fallback = None if _ok(loaded) else realtime_by_client()  # while the batch load still runs
        _stop(sat_proc)
        thread.join(timeout=duration + 90)
    return _Saturation(loaded, latencies, served_items, window, box.get("outcomes"), box.get("error"), client_fallback)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _priority_report(out: AbOutcome, ctx: AbContext, top, lowest, batch, rt_rate, count, duration, unloaded,
                     sat: _Saturation, fallback: Mapping[str, Any]) -> None:
    items = batch.batch_size
    text = [f"{top.name}: Poisson {rt_rate:g} req/s (10% of the measured peak), priority {top.level} via perf_analyzer "
            f"`--request-parameter priority:{top.level}:int` over gRPC, {count} requests per measurement. "
            f"{lowest.name} at priority {lowest.level}: perf_analyzer keeping 64 requests x {items} items in flight, plus "
            f"the open-loop client at Poisson {batch.rate:.1f} req/s x {items} items. While {top.name} was measured the "
            f"server executed {sat.served_items:.0f} items/s (average batch {sat.window.avg_batch_size:.1f}, "
            f"{sat.window.queue_ms_per_request:.1f} ms queue per request), against an in-process limit of {ctx.limit:.0f} items/s."]
    streams = []
    if sat.outcomes is not None:
        summary, lat_batch = loadgen.summarize(sat.outcomes, lowest.name, duration + 6.0)
        out.cdf_samples[f"{lowest.name} (priority {lowest.level}), saturating"] = lat_batch
        streams.append({"experiment": "priority mix", "variant": "dynamic", "load": f"{batch.rate * items:.0f} items/s",
                        "streams": [summary.__dict__]})
        text.append(f"{lowest.name} stream: {summary.requests} requests, {summary.rejected} rejected by the queue policy, "
                    f"{summary.other_errors} other errors.")
    else:
        text.append(f"{lowest.name} stream failed: {sat.error or 'did not finish'}.")
    p99 = _realtime_p99(out, top, text, streams, rt_rate, ((f"alone", unloaded), (f"under {lowest.name} load", sat.loaded)), fallback)
    if len(p99) == 2:
        a, b = p99["alone"], p99[f"under {lowest.name} load"]
        rejected = sum(fallback[n][0].rejected for n in fallback)
        out.headlines.append(
            f"Realtime P99 under batch saturation: {b:.1f} ms vs {a:.1f} ms alone = {_ratio(b, a):.2f}x [target <= 2x]"
            + (f"; {rejected} realtime requests rejected (queue timeout/full)." if fallback else "."))
    out.headlines.append(
        f"Saturated by batch clients ({lowest.name}: 64 requests x {items} items in flight, plus {top.name} traffic), "
        f"the server executed {sat.served_items:.0f} items/s = {_ratio(sat.served_items, ctx.limit):.1%} of the in-process limit "
        f"(average executed batch {sat.window.avg_batch_size:.1f}).")
    ctx.progress("[perf] priority mix: " + " ".join(text[1:]))
    out.results["priority"] = {"text": text, "streams": streams}


def _realtime_p99(out: AbOutcome, top, text: list, streams: list, rt_rate: float, measured, fallback) -> dict[str, float]:
    p99 = {}
    for name, record in measured:
        if _ok(record):
            p99[name] = record.p99_ms
            text.append(f"{top.name} {name} (perf_analyzer): P50 {record.p50_ms:.1f} ms, P99 {record.p99_ms:.1f} ms, "
                        f"{record.requests} requests, 0 rejected, {record.stalled} took {STALL_TEXT}.")
            continue
        text.append(f"{top.name} {name} (perf_analyzer): stopped at an error: {record.note}.")
        if name in fallback:
            summary, latencies = fallback[name]
            p99[name] = summary.p99_ms
            out.cdf_samples[f"{top.name} (priority {top.level}), {name} (client)"] = latencies
            streams.append({"experiment": "priority mix (client, after perf_analyzer stopped)", "variant": "dynamic",
                            "load": f"{rt_rate:g} req/s", "streams": [summary.__dict__]})
            text.append(f"{top.name} {name} (open-loop client, same rate): {summary.requests} requests, "
                        f"{summary.rejected} rejected, {summary.other_errors} other errors, P99 {summary.p99_ms:.1f} ms "
                        f"of the answered ones.")
    return p99
