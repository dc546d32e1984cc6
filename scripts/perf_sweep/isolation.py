"""Partitioned vs shared: does a saturated neighbour model hurt the main model's latency?

Partitioned: the running servers from the manifest (each partition its own tritonserver on its own
home cores; under the default elastic placement an idle neighbour lends its cores). Shared: one temporary tritonserver, unpinned, serving both models with every core.
In both, the main model gets the same Poisson load twice -- alone, then while the neighbour (a model
of another partition) is flooded by the open-loop client -- and P99 is compared.
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from typing import Any, Callable

from contracts.model_config import read_model_config
from perf_sweep import loadgen
from perf_sweep.errors import SweepRunError
from perf_sweep.plan import Endpoint, LoadMode, SweepSpec
from perf_sweep.results import PerfRecord
from perf_sweep.runner import RunFolder, run_level
from perf_sweep.variants import ServedVariant, start_variant_server, write_variant_repository

Progress = Callable[[str], None]


def _flooded(measure: Callable[[], tuple[PerfRecord, list[float]]], url: str, model: str, prepared,
             items: int, rate: float, seconds: float, seed: int) -> tuple[PerfRecord, dict[str, Any]]:
    """Run `measure` while `model` at `url` is flooded with `rate` requests/s of `items` items."""
    planned = loadgen.plan_requests([loadgen.Stream("neighbour", rate, batch_size=items)], seconds, seed=seed)
    box: dict[str, Any] = {}

    def flood():
        try:
            outcomes = loadgen.run_open_loop(url, model, prepared.input_name, prepared.samples, prepared.datatype,
                                             planned, drain_timeout_s=60)
            box["summary"] = loadgen.summarize(outcomes, "neighbour", seconds)[0].__dict__
        except Exception as exc:  # reported with the measurement
            box["error"] = str(exc)

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    time.sleep(1.5)
    record, _ = measure()
    thread.join(timeout=seconds + 90)
    return record, box


def run_isolation_ab(spec, main_ep: Endpoint, neighbour: Endpoint, prepared, rate: float, opts,
                     folder: RunFolder, progress: Progress, binary, env) -> dict[str, Any]:
    """Records and a headline for partitioned vs shared; {"skipped": line} when it cannot run.
    `neighbour` must be served in another partition and accept the same inputs as the main model."""
    main = main_ep.model
    # the flood goes to the neighbour without a priority, so at its default level: the size callers
    # keep there, the neighbour's own where it sets one
    levels = {p.level: p for p in spec.priorities_for(spec.model(neighbour.model))}
    items = levels[spec.default_priority_level].max_request_batch_size if levels else 8
    seconds, count = 10.0, int(rate * 6)
    flood_rate = 400.0  # requests/s: about what the Python client can fire on this host
    records: list[PerfRecord] = []
    results: dict[str, Any] = {}

    def measure(name: str, url: str, metrics: str) -> Callable[[], tuple[PerfRecord, list[float]]]:
        sweep = SweepSpec(name=f"ab.isolation.{name}", model=main, url=url, levels=(rate,), mode=LoadMode.REQUEST_RATE,
                          input_data=prepared.path, measurement=opts.measurement, metrics_url=metrics, variant=name)
        return lambda: run_level(sweep, rate, folder, binary, env, request_count=count)

    repo = folder.root / "shared_repository"
    for model in (main, neighbour.model):
        base = spec.model(model)
        delay = base.max_queue_delay_microseconds
        delay = spec.batching.max_queue_delay_microseconds if delay is None else delay
        onnx = opts.config.parent / model / "1" / "model.onnx"
        served_max_batch = read_model_config(onnx.parent.parent).max_batch_size  # the build's, not serving.toml's
        write_variant_repository(spec, model, [ServedVariant("shared", model, onnx, served_max_batch, delay)], repo,
                                 served_dir=onnx.parent.parent)
    cpus = sorted(os.sched_getaffinity(0))
    progress(f"[perf] partitioned vs shared: {main} at {rate:g} req/s, neighbour {neighbour.model} flooded "
             f"({flood_rate:g} req/s x {items} items); shared server on CPUs {cpus}")
    setups = [("partitioned", main_ep.grpc_url, main_ep.metrics_url, neighbour.grpc_url, None)]
    try:
        process, _, grpc, metrics = start_variant_server(repo, folder.root / "shared_server", [main, neighbour.model],
                                                         (), len(cpus), max_input_bytes=spec.server.max_input_bytes)
    except SweepRunError as exc:
        return {"skipped": f"partitioned vs shared: {exc}".splitlines()[0]}
    setups.append(("shared", grpc, "http://" + metrics, grpc, process))
    try:
        for name, url, metrics_url, neighbour_url, _ in setups:
            alone, _ = measure(f"{name}_alone", url, metrics_url)()
            loaded, box = _flooded(measure(f"{name}_neighbour_flooded", url, metrics_url), neighbour_url,
                                   neighbour.model, prepared, items, flood_rate, seconds, opts.seed + 11)
            records += [alone, loaded]
            results[name] = {"alone": alone, "loaded": loaded, "neighbour": box}
            progress(f"[perf] isolation {name}: P99 alone {alone.p99_ms:.1f} ms, neighbour flooded {loaded.p99_ms:.1f} ms")
    finally:
        process.stop()
        shutil.copy2(process.log_path, folder.root / "tritonserver-shared.log")
    parts = []
    for name, r in results.items():
        a, b = r["alone"], r["loaded"]
        n = r["neighbour"].get("summary") or {}
        parts.append(f"{name}: P99 {a.p99_ms:.1f} ms alone -> {b.p99_ms:.1f} ms with the neighbour flooded "
                     f"({b.p99_ms / a.p99_ms if a.p99_ms == a.p99_ms and a.p99_ms else float('nan'):.2f}x; neighbour "
                     f"served {n.get('throughput', float('nan')):.0f} items/s)")
    headline = f"Partitioned vs shared ({main}, Poisson {rate:g} req/s): " + "; ".join(parts) + "."
    return {"records": records, "headline": headline}
