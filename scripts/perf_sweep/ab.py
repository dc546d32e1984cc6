"""The A/B block of a run, all on one temporary server so every variant is measured alike:

1. dynamic batching vs no batching (perf_analyzer, closed loop, concurrency 1 and 16);
2. dynamic vs none vs client-side static batching at a sparse and a high Poisson load (the
   open-loop client: static batching's wait-to-fill counts in each item's latency);
3. the batching-delay window sweep at the recommended operating rate -> `choose_max_queue_delay`;
4. INT8 vs FP32 when the build produced an INT8 file;
5. the priority mix: realtime (perf_analyzer, `--request-parameter priority:1:int`) alone, then
   under a saturating batch stream (priority 2, open-loop client, rejections counted);
6. the in-process ONNX Runtime limit at its best batch size (measured first; perf_sweep.limits).
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
from perf_sweep.results import PerfRecord, server_metrics_delta
from perf_sweep.runner import RunFolder, run_level, run_sweep, scrape_metrics
from perf_sweep.variants import plan_variants, start_variant_server, write_variant_repository

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
    try:
        record = json.loads((artifacts / model / "build.json").read_text())
    except FileNotFoundError:
        return {}
    from contracts.serving_spec import Variant  # only precisions the CPU path serves (not e.g. GPU-only graphs)

    served = record.get("served_file")
    return {label: artifacts / model / v["file"] for label, v in record.get("variants", {}).items()
            if label in {x.value for x in Variant} and v.get("file") and v["file"] != served
            and (artifacts / model / v["file"]).exists()}


def _ok(record: PerfRecord | None) -> bool:
    return record is not None and record.status != "failed"


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def run_ab_block(spec, endpoint, prepared, main_knee: Mapping[str, Any], opts, folder: RunFolder,
                 progress: Progress) -> AbOutcome:
    """Everything above for `endpoint.model`, pinned like its partition (same CPU set and threads)."""
    out = AbOutcome()
    model = endpoint.model
    if prepared.samples is None:
        out.skipped.append(f"A/B block: {model}'s inputs are not recognised, nothing to compare.")
        return out
    onnx = opts.config.parent / model / "1" / "model.onnx"
    pinning = describe_pinning(endpoint.cpus, endpoint.intra_op_threads, endpoint.server)
    progress(f"[perf] in-process ONNX Runtime limit of {model} ({pinning})")
    limit_points = measure_in_process_limit(onnx, prepared.samples, prepared.input_name,
                                            intra_op_threads=endpoint.intra_op_threads, cpus=endpoint.cpus)
    best = best_point(limit_points)
    # The served-vs-limit headlines are written by the campaign (perf_sweep.limits.served_vs_limit_headlines).
    out.results["limit"] = {
        "text": (f"`{onnx.relative_to(opts.config.parent.parent)}` in ONNX Runtime in this process, {pinning}: "
                 f"best {best.throughput:.0f} items/s at batch {best.batch_size}."),
        "points": [p.__dict__ for p in limit_points], "best": best.__dict__,
    }
    extra = extra_variant_files(opts.artifacts, model)
    if not extra:
        out.skipped.append(f"INT8-mixed vs FP32: no other CPU precision of {model} in {opts.artifacts / model}/build.json.")
    variants = plan_variants(spec, model, onnx, opts.static_batch, opts.delays_ms, extra)
    by_label = {v.label: v for v in variants}
    repo = write_variant_repository(spec, model, variants, folder.root / "ab_repository")
    progress(f"[perf] A/B: starting a temporary tritonserver with {len(variants)} variants of {model} ({pinning})")
    try:
        process, http, grpc, metrics = start_variant_server(
            repo, folder.root / "ab_server", [v.served_name for v in variants], endpoint.cpus, endpoint.intra_op_threads)
    except SweepRunError as exc:
        out.skipped.append(f"A/B block: {exc}".splitlines()[0])
        progress(f"[perf] A/B block skipped: {exc}")
        return out
    out.results["ab_notes"] = [f"Temporary server {pinning}; variants: " + ", ".join(
        f"{v.label} (max_batch_size {v.max_batch_size}, delay {v.max_queue_delay_microseconds} us"
        f"{'' if v.queue_policies else ', no priority levels or queue policies'})" for v in variants) + "."]
    try:
        _measure(out, spec, model, prepared, main_knee, best.throughput, opts, folder, progress, by_label, grpc, metrics)
    finally:
        process.stop()
        shutil.copy2(process.log_path, folder.root / "tritonserver-ab.log")
    return out


def _measure(out: AbOutcome, spec, model, prepared, main_knee, limit: float, opts, folder, progress, by_label,
             grpc, metrics) -> None:
    binary, env = find_perf_analyzer(), perf_analyzer_environment()
    common = dict(url=grpc, input_data=prepared.path, measurement=opts.measurement, metrics_url=metrics)
    peak = (main_knee.get("peak") or {}).get("throughput") or 100.0
    knee = main_knee.get("knee")
    operating_rate = round(0.8 * (knee["throughput"] if knee else peak), 1)

    # 1. dynamic vs none, closed loop
    at16: dict[str, PerfRecord] = {}
    closed_loop = [label for label in by_label if not label.startswith(("static", "delay"))]
    for label in closed_loop:
        v = by_label[label]
        sweep = SweepSpec(name=f"ab.{label}.concurrency", model=v.served_name, levels=(1, 16), variant=label, **common)
        records, _ = run_sweep(sweep, folder, progress, binary, env, stop_after_failure=False)
        out.records += records
        at16[label] = next((r for r in records if r.load == 16), None)
    if _ok(at16.get("dynamic")) and _ok(at16.get("no_batching")):
        d, n = at16["dynamic"], at16["no_batching"]
        out.headlines.append(
            f"Dynamic batching vs none at concurrency 16: {d.throughput:.0f} vs {n.throughput:.0f} infer/s = "
            f"{_ratio(d.throughput, n.throughput):.2f}x [target >= 2x]; P99 {d.p99_ms:.1f} vs {n.p99_ms:.1f} ms; "
            f"requests >= 0.45 s (Triton's batcher stall, docs/triton-batcher-stall.md): {d.stalled} vs {n.stalled}.")
    elif at16.get("dynamic") and at16.get("no_batching"):
        d, n = at16["dynamic"], at16["no_batching"]
        out.headlines.append(
            f"Dynamic batching vs none at concurrency 16 [target >= 2x]: dynamic "
            f"{'%.0f infer/s' % d.throughput if _ok(d) else 'FAILED (' + d.note + ')'}; no batching "
            f"{'%.0f infer/s' % n.throughput if _ok(n) else 'FAILED (' + n.note + ')'}.")
    plain_d, plain_n = at16.get("dynamic_no_queue_policy"), at16.get("no_batching_no_queue_policy")
    if _ok(plain_d) and _ok(plain_n):
        out.headlines.append(
            f"Dynamic batching vs none at concurrency 16, both without priority levels or queue policies (no "
            f"Triton batcher stall on either side): {plain_d.throughput:.0f} vs {plain_n.throughput:.0f} infer/s = "
            f"{_ratio(plain_d.throughput, plain_n.throughput):.2f}x; P99 {plain_d.p99_ms:.1f} vs {plain_n.p99_ms:.1f} ms; "
            f"requests >= 0.45 s: {plain_d.stalled} vs {plain_n.stalled}.")
    zero_delay = at16.get("dynamic_0ms_no_queue_policy")
    if _ok(zero_delay) and _ok(plain_n):
        out.headlines.append(
            f"Dynamic batching with no delay window vs none at concurrency 16, both without priority levels or "
            f"queue policies: {zero_delay.throughput:.0f} vs {plain_n.throughput:.0f} infer/s = "
            f"{_ratio(zero_delay.throughput, plain_n.throughput):.2f}x (avg batch "
            f"{(zero_delay.server or {}).get('avg_batch_size', float('nan')):.1f}); P99 {zero_delay.p99_ms:.1f} vs "
            f"{plain_n.p99_ms:.1f} ms.")
    for label, record in at16.items():
        if label not in ("dynamic", "no_batching", "no_batching_no_queue_policy", "dynamic_0ms_no_queue_policy") \
                and _ok(record) and _ok(at16.get("dynamic")):
            if label == "dynamic_no_queue_policy":
                d = at16["dynamic"]
                out.headlines.append(
                    f"Priority levels + queue policies cost (same delay, concurrency 16): P99 {d.p99_ms:.1f} ms with vs "
                    f"{record.p99_ms:.1f} ms without; {d.throughput:.0f} vs {record.throughput:.0f} infer/s; "
                    f"requests >= 0.45 s: {d.stalled} vs {record.stalled}.")
                continue
            d = at16["dynamic"]
            out.headlines.append(f"Precision: {label} vs the served {spec.model(model).variant.value} (same server, "
                                 f"same batching) at concurrency 16: {record.throughput:.0f} vs "
                                 f"{d.throughput:.0f} infer/s ({_ratio(record.throughput, d.throughput):.2f}x), "
                                 f"P99 {record.p99_ms:.1f} vs {d.p99_ms:.1f} ms.")

    # 2. dynamic vs none vs static, open loop at sparse and high load (same client for all three)
    static_label = next(l for l in by_label if l.startswith("static"))
    rows = []
    for load_name, rate in (("sparse", opts.sparse_rate), ("high", operating_rate)):
        for label in ("dynamic", "no_batching", static_label):
            v = by_label[label]
            stream = loadgen.Stream(label, rate, batch_size=v.max_batch_size if label == static_label else 1,
                                    static_batching=label == static_label)
            planned = loadgen.plan_requests([stream], opts.loadgen_seconds, seed=opts.seed)
            outcomes = loadgen.run_open_loop(grpc, v.served_name, prepared.input_name, prepared.samples,
                                             prepared.datatype, planned)
            summary, _ = loadgen.summarize(outcomes, label, opts.loadgen_seconds)
            rows.append({"experiment": f"{load_name} load", "variant": label, "load": f"{rate:g} items/s",
                         "streams": [summary.__dict__]})
            progress(f"[perf] ab.openloop {load_name} {rate:g}/s {label}: {summary.throughput:.1f} items/s "
                     f"p50 {summary.p50_ms:.1f} p99 {summary.p99_ms:.1f} ms, errors {summary.rejected + summary.other_errors}")
    out.results["loadgen"] = rows
    _field_report_check(out, rows, static_label)

    # 3. delay window sweep at the recommended operating rate
    points, delay_records = [], []
    for label, v in by_label.items():
        if not label.startswith("delay_"):
            continue
        sweep = SweepSpec(name=f"ab.{label}.poisson", model=v.served_name, mode=LoadMode.REQUEST_RATE,
                          levels=(operating_rate,), variant=label, **common)
        records, _ = run_sweep(sweep, folder, progress, binary, env)
        delay_records += records
        if _ok(records[0]):
            points.append(DelayPoint(v.max_queue_delay_microseconds, records[0].throughput, records[0].p99_ms))
    out.records += delay_records
    if points:
        choice = choose_max_queue_delay(points)
        table = ["| max_queue_delay | infer/s | P99 ms |", "|---:|---:|---:|"]
        table += [f"| {p.delay_us / 1000:g} ms | {p.throughput:.1f} | {p.p99_ms:.2f} |" for p in choice.points]
        basis = "knee" if knee else "peak; knee not reached"
        text = (f"Poisson load at {operating_rate:g} req/s (80% of the served {basis}). Chosen: **{choice.chosen.delay_us} us** "
                f"({choice.rule}).\n\n" + "\n".join(table))
        if opts.write_back:
            from perf_sweep.writeback import write_queue_delay

            write_queue_delay(opts.config, model, choice.chosen.delay_us)
            text += f"\n\nWritten back to `{opts.config.name}` as [models.{model}] max_queue_delay_microseconds."
        else:
            text += f"\n\nTo apply: `python -m perf_sweep write-back --model {model} --delay-us {choice.chosen.delay_us}`."
        out.results["delay"] = {"text": text, "chosen_us": choice.chosen.delay_us}
        out.headlines.append(f"Recommended max_queue_delay for {model}: {choice.chosen.delay_us} us (delay sweep at {operating_rate:g} req/s).")

    # 5. priority mix
    _priority_mix(out, spec, by_label["dynamic"], prepared, peak, limit, opts, folder, progress, binary, env, common)


def _field_report_check(out: AbOutcome, rows, static_label: str) -> None:
    def get(load, label):
        return next(r["streams"][0] for r in rows if r["experiment"] == f"{load} load" and r["variant"] == label)

    for load in ("sparse", "high"):
        d, s, n = get(load, "dynamic"), get(load, static_label), get(load, "no_batching")
        out.results.setdefault("ab_notes", []).append(
            f"{load} load: dynamic P99 {d['p99_ms']:.1f} ms vs static {s['p99_ms']:.1f} ms "
            f"({1 - _ratio(d['p99_ms'], s['p99_ms']):.0%} lower) and {d['throughput']:.1f} vs {s['throughput']:.1f} items/s; "
            f"no batching P99 {n['p99_ms']:.1f} ms, {n['throughput']:.1f} items/s, "
            f"{n['rejected'] + n['other_errors']} errors.")
    d, s = get("sparse", "dynamic"), get("sparse", static_label)
    out.headlines.append(
        f"Field-report check at sparse load (claim: dynamic cuts P99 by 60% and adds 15% throughput over static "
        f"batching): dynamic P99 {d['p99_ms']:.1f} ms vs {static_label} {s['p99_ms']:.1f} ms = "
        f"{1 - _ratio(d['p99_ms'], s['p99_ms']):.0%} lower; items/s {_ratio(d['throughput'], s['throughput']) - 1:+.0%} "
        f"(open loop: both carry the offered load, static's shortfall is items left in an unfilled batch when the "
        f"window closed).")


def _priority_mix(out, spec, variant, prepared, peak, limit, opts, folder, progress, binary, env, common) -> None:
    if len(spec.priorities) < 2:
        out.skipped.append("priority mix: serving.toml declares fewer than 2 priority levels.")
        return
    rt_rate = round(max(5.0, 0.1 * peak), 1)
    duration = 8.0
    count = int(rt_rate * duration)
    top, lowest = spec.priorities[0], spec.priorities[-1]
    realtime = SweepSpec(name="ab.priority.realtime", model=variant.served_name, mode=LoadMode.REQUEST_RATE,
                         levels=(rt_rate,), variant=f"{top.name} (priority {top.level})",
                         request_parameters=(RequestParameter("priority", str(top.level)),), **common)
    unloaded, lat_unloaded = run_level(realtime, rt_rate, folder, binary, env, request_count=count)
    fallback: dict[str, Any] = {}  # realtime measured by the client where perf_analyzer stopped at an error

    def realtime_by_client(name: str) -> None:
        stream = loadgen.Stream(f"{top.name} ({name})", rt_rate, priority=top.level)
        outcomes = loadgen.run_open_loop(common["url"], variant.served_name, prepared.input_name, prepared.samples,
                                         prepared.datatype, loadgen.plan_requests([stream], duration, seed=opts.seed + 13))
        fallback[name] = loadgen.summarize(outcomes, stream.name, duration)

    if not _ok(unloaded):
        realtime_by_client("alone")
    # Batch work as the clients send it (max_request_batch_size items per request) from two sources:
    # perf_analyzer keeps 64 such requests in flight (saturates the server; C++ is fast enough), and
    # the open-loop client adds Poisson arrivals (capped at 200 requests/s, what Python fires here)
    # whose outcomes count the rejections of the batch priority.
    items = lowest.max_request_batch_size
    batch = loadgen.Stream(lowest.name, min(200.0, 1.5 * limit / items), batch_size=items, priority=lowest.level)
    planned = loadgen.plan_requests([batch], duration + 6.0, seed=opts.seed + 7)
    saturator = SweepSpec(name="ab.priority.batch_saturator", model=variant.served_name, levels=(64,), batch_size=items,
                          variant=lowest.name, request_parameters=(RequestParameter("priority", str(lowest.level)),),
                          **{**common, "measurement": dataclasses.replace(common["measurement"], max_trials=50)})
    sat_dir = folder.sweep_dir(saturator)
    sat_argv = render_perf_analyzer_command(saturator, 64, sat_dir / "unused.csv", None, binary)
    folder.log_command(sat_argv, env, "batch saturator (runs in the background; stopped after the realtime measurement)")
    box: dict[str, Any] = {}

    def background():
        try:
            box["outcomes"] = loadgen.run_open_loop(common["url"], variant.served_name, prepared.input_name,
                                                    prepared.samples, prepared.datatype, planned, drain_timeout_s=60)
        except Exception as exc:  # reported below; the realtime measurement stands on its own
            box["error"] = str(exc)

    with open(sat_dir / "saturator.stdout.txt", "w") as sat_log:
        sat_proc = subprocess.Popen(sat_argv, env=dict(env), stdout=sat_log, stderr=subprocess.STDOUT)
        thread = threading.Thread(target=background, daemon=True)
        thread.start()
        time.sleep(2.0)  # let the batch queue fill before measuring realtime
        before, started = scrape_metrics(common["metrics_url"]), time.monotonic()
        loaded_sweep = dataclasses.replace(realtime, name="ab.priority.realtime_under_batch")
        loaded, lat_loaded = run_level(loaded_sweep, rt_rate, folder, binary, env, request_count=count)
        window = server_metrics_delta(before, scrape_metrics(common["metrics_url"]), variant.served_name)
        served_items = window.inferences / (time.monotonic() - started)
        if not _ok(loaded):
            realtime_by_client(f"under {lowest.name} load")
        sat_proc.terminate()
        try:
            sat_proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sat_proc.kill()
            sat_proc.wait()
        thread.join(timeout=duration + 90)
    out.records += [unloaded, loaded]
    out.cdf_samples[f"{top.name} (priority {top.level}), alone"] = lat_unloaded
    out.cdf_samples[f"{top.name} (priority {top.level}), under {lowest.name} saturation"] = lat_loaded
    text = [f"{top.name}: Poisson {rt_rate:g} req/s (10% of the measured peak), priority {top.level} via perf_analyzer "
            f"`--request-parameter priority:{top.level}:int` over gRPC, {count} requests per measurement. "
            f"{lowest.name} at priority {lowest.level}: perf_analyzer keeping 64 requests x {items} items in flight, plus "
            f"the open-loop client at Poisson {batch.rate:.1f} req/s x {items} items. While {top.name} was measured the "
            f"server executed {served_items:.0f} items/s (average batch {window.avg_batch_size:.1f}, "
            f"{window.queue_ms_per_request:.1f} ms queue per request), against an in-process limit of {limit:.0f} items/s."]
    streams = []
    if "outcomes" in box:
        summary, lat_batch = loadgen.summarize(box["outcomes"], lowest.name, duration + 6.0)
        out.cdf_samples[f"{lowest.name} (priority {lowest.level}), saturating"] = lat_batch
        streams.append({"experiment": "priority mix", "variant": "dynamic", "load": f"{batch.rate * items:.0f} items/s",
                        "streams": [summary.__dict__]})
        text.append(f"{lowest.name} stream: {summary.requests} requests, {summary.rejected} rejected by the queue policy, "
                    f"{summary.other_errors} other errors.")
    else:
        text.append(f"{lowest.name} stream failed: {box.get('error', 'did not finish')}.")
    p99 = {}
    for name, record in (("alone", unloaded), (f"under {lowest.name} load", loaded)):
        if _ok(record):
            p99[name] = record.p99_ms
            text.append(f"{top.name} {name} (perf_analyzer): P50 {record.p50_ms:.1f} ms, P99 {record.p99_ms:.1f} ms, "
                        f"{record.requests} requests, 0 rejected, {record.stalled} took >= 0.45 s.")
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
    if len(p99) == 2:
        a, b = p99["alone"], p99[f"under {lowest.name} load"]
        rejected = sum(fallback[n][0].rejected for n in fallback)
        out.headlines.append(
            f"Realtime P99 under batch saturation: {b:.1f} ms vs {a:.1f} ms alone = {_ratio(b, a):.2f}x [target <= 2x]"
            + (f"; {rejected} realtime requests rejected (queue timeout/full)." if fallback else "."))
    out.headlines.append(
        f"Saturated by batch clients ({lowest.name}: 64 requests x {items} items in flight, plus {top.name} traffic), "
        f"the server executed {served_items:.0f} items/s = {_ratio(served_items, limit):.1%} of the in-process limit "
        f"(average executed batch {window.avg_batch_size:.1f}).")
    progress("[perf] priority mix: " + " ".join(text[1:]))
    out.results["priority"] = {"text": text, "streams": streams}
