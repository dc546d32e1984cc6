"""`make perf-generate`: continuous vs static vs one-at-a-time batching, and prefix sharing on/off.

Every arm runs the served engine in-process (the same `GenerationEngine`, decoder graph from
model_repository/<model>/1, KV sizing and slot count as the Triton model; the scheduler policy is
the only difference), with an open-loop Poisson arrival thread and the stepping loop the Triton
model runs. In-process on purpose: the comparison is of scheduling, and the Triton hop (the same
for all arms) would add noise on a 2-core machine; the served path is covered by the integration
tests and the same numbers appear in the served model's metrics.

Arms: each policy at each rate (long-tailed outputs 16-256), an equal-length control (all 64
tokens), and prefix sharing on vs off with the long system prompt (low rate, 16 tokens, so TTFT is
prefill, not queueing). Writes results.json, report.md, plots and raw per-request timings under
reports/perf/generate-<timestamp>/.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from perf_sweep.generate_workload import LONG_SYSTEM_PROMPT, RequestTiming, Sla, poisson_workload, summarise

from contracts.layout import PROJECT_ROOT


@dataclass(frozen=True)
class Arm:
    name: str
    policy: str
    rate: float
    count: int
    fixed_length: int | None = None
    prefix_sharing: bool = True
    seed: int = 0


def plan_arms(rates=None, count=None, quick=False) -> list[Arm]:
    """The benchmark's arms. `rates` / `count` not given: (0.25, 0.5, 1.0) and 16 requests per arm, or
    with `quick` one rate and 6 (what is given is kept: --quick used to drop --rates and --count)."""
    rates = tuple(rates) if rates else ((1.0,) if quick else (0.25, 0.5, 1.0))
    count = count if count is not None else (6 if quick else 16)
    arms = [Arm(f"{policy}@{rate:g}", policy, rate, count) for rate in rates for policy in ("continuous", "static", "one_at_a_time")]
    top = max(rates)
    arms += [Arm(f"equal-length {policy}@{top:g}", policy, top, count, fixed_length=64 if not quick else 16) for policy in ("continuous", "static")]
    arms += [Arm(f"prefix {'on' if on else 'off'}@0.25", "continuous", 0.25, 12 if not quick else 4, fixed_length=16, prefix_sharing=on)
             for on in (True, False)]
    return arms


class _Runtime:
    """The served model's files and settings, loaded once; `engine(arm)` makes a fresh engine per arm."""

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer

        from serving.generation.engine import DecoderGraph
        from serving.generation.spec_file import GenerationSpec

        version = model_dir / "1"
        from contracts.model_config import config_parameters, read_model_config

        self.params = config_parameters(read_model_config(model_dir))
        self.spec = GenerationSpec.read(version / self.params["spec_file"])
        self.tokenizer = Tokenizer.from_file(str(version / self.params["tokenizer_file"]))
        self.graph = DecoderGraph(str(version / self.params["graph_file"]))

    def engine(self, arm: Arm):
        from serving.generation.engine import GenerationEngine
        from serving.generation.kv_store import KvStore
        from serving.generation.scheduler import Scheduler, SchedulerConfig

        p = self.params
        layout = self.spec.kv_layout(int(p["block_size"]), p["kv_dtype"])
        config = SchedulerConfig(num_blocks=int(p["num_blocks"]), block_size=layout.block_size, max_running=int(p["max_running"]),
                                 max_context=int(p["max_context"]), prefill_chunk_tokens=int(p["prefill_chunk_tokens"]),
                                 max_waiting={1: 10_000, 2: 10_000}, policy=arm.policy, prefix_sharing=arm.prefix_sharing,
                                 eos_token_ids=self.spec.eos_token_ids)
        return GenerationEngine(self.graph, Scheduler(config), KvStore(layout, config.num_blocks))


def run_arm(runtime: _Runtime, arm: Arm, sla: Sla) -> tuple[dict, list[dict]]:
    from serving.generation.chat import render_chat_prompt
    from serving.generation.requests import GenerationRequest, SamplingParams

    lengths = [arm.fixed_length] * arm.count if arm.fixed_length else None
    workload = poisson_workload(arm.count, arm.rate, arm.seed, lengths)
    engine = runtime.engine(arm)
    prompts = [tuple(runtime.tokenizer.encode(render_chat_prompt(w.user_prompt, LONG_SYSTEM_PROMPT), add_special_tokens=False).ids)
               for w in workload]
    token_times: dict[str, list[float]] = {f"q{i}": [] for i in range(len(workload))}
    arrivals: dict[str, float] = {}
    origin = time.monotonic()

    def arrive() -> None:
        for i, (w, prompt) in enumerate(zip(workload, prompts)):
            time.sleep(max(0.0, origin + w.arrival_s - time.monotonic()))
            arrivals[f"q{i}"] = time.monotonic()
            engine.submit(GenerationRequest(f"q{i}", prompt, SamplingParams(max_tokens=w.output_tokens, ignore_eos=True), priority=2))

    load_before = os.getloadavg()[0]
    feeder = threading.Thread(target=arrive, daemon=True)
    feeder.start()
    decode_batches, finished = [], 0
    while finished < len(workload):
        if engine.idle:
            time.sleep(0.002)
            continue
        result = engine.step()
        now = time.monotonic()
        for sequence, _ in result.tokens:
            token_times[sequence.request_id].append(now)
        if result.decode_batch:
            decode_batches.append(result.decode_batch)
        finished += len(result.finished)
    feeder.join()
    timings = [RequestTiming(arrivals[rid], tuple(times)) for rid, times in token_times.items()]
    summary = {**asdict(arm), **summarise(timings, decode_batches, engine.scheduler.config.max_running, sla),
               "prefix_hit_rate": round(engine.scheduler.prefix_cache.stats.hit_rate, 3),
               "mean_prompt_tokens": round(sum(map(len, prompts)) / len(prompts), 1),
               "load_average_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    raw = [{"request": rid, "arrival_s": arrivals[rid] - origin, "token_times_s": [t - origin for t in times]}
           for rid, times in token_times.items()]
    return summary, raw


def decode_speed(runtime: _Runtime, batches=(1, 2, 4, 8, 16), pasts=(128, 512), repeats: int = 5) -> list[dict]:
    """Time one decode step of the served graph (ONNX Runtime, this process's threads) per batch
    size and past length: the raw decode speed the scheduler works with."""
    import numpy as np

    layout = runtime.spec.kv_layout(1)
    layers, heads, dim = layout.layers, layout.kv_heads, layout.head_dim
    rows = []
    for past in pasts:
        for batch in batches:
            keys = np.zeros((layers, batch, heads, past, dim), np.float32)
            lengths = np.full(batch, past, np.int64)
            call = lambda: runtime.graph.run(np.ones((batch, 1), np.int64), lengths[:, None], keys, keys, lengths, np.zeros(batch, np.int64))
            call()
            started = time.perf_counter()
            for _ in range(repeats):
                call()
            ms = (time.perf_counter() - started) / repeats * 1000
            rows.append({"batch": batch, "past": past, "step_ms": round(ms, 1), "tokens_per_s": round(batch * 1000 / ms, 1),
                         "load_average": round(os.getloadavg()[0], 2)})
    return rows


def machine() -> str:
    from contracts.devices import read_cpu_info

    return f"{read_cpu_info().describe()}, {platform.machine()}"


def command_line(argv: list[str] | None) -> str:
    """The command as it was run, for the report: `argv`, else this process's own arguments (the
    `python -m` entry point passes none, and the report said the quick run was the full one)."""
    import shlex
    import sys

    return "python -m perf_sweep.generate_bench " + shlex.join(sys.argv[1:] if argv is None else argv)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="perf_sweep.generate_bench", description=__doc__)
    parser.add_argument("--model", default="smollm2_chat")
    parser.add_argument("--quick", action="store_true", help="one rate, a few requests: a smoke run")
    parser.add_argument("--rates", type=float, nargs="+", help="Poisson arrival rates in requests/s (default 0.25 0.5 1.0; --quick: 1.0)")
    parser.add_argument("--count", type=int, help="requests per arm (default 16; --quick: 6)")
    parser.add_argument("--out-root", type=Path, default=PROJECT_ROOT / "reports" / "perf")
    parser.add_argument("--decode-speed-only", action="store_true", help="only time decode steps per batch size and past length")
    args = parser.parse_args(argv)
    from perf_sweep.generate_report import write_generate_report

    model_dir = PROJECT_ROOT / "model_repository" / args.model
    if not (model_dir / "config.pbtxt").exists():
        raise SystemExit(f"perf_sweep.generate_bench: {model_dir} is not built: run `make build-engines` first.")
    runtime, sla = _Runtime(model_dir), Sla()
    out = args.out_root / time.strftime("generate-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    speed = decode_speed(runtime, repeats=2 if args.quick else 5)
    for row in speed:
        print(f"[perf-generate] decode step batch {row['batch']:2d} past {row['past']}: {row['step_ms']} ms = {row['tokens_per_s']} tok/s "
              f"(load average {row['load_average']})", flush=True)
    results, raw = [], {}
    arms = [] if args.decode_speed_only else plan_arms(args.rates, args.count, args.quick)
    for arm in arms:
        summary, raw[arm.name] = run_arm(runtime, arm, sla)
        results.append(summary)
        print(f"[perf-generate] {arm.name}: {summary['output_tokens_per_s']} tok/s, TTFT P50/P99 {summary['ttft_p50_s']}/"
              f"{summary['ttft_p99_s']} s, ITL P50/P99 {summary['itl_p50_s']}/{summary['itl_p99_s']} s, "
              f"occupancy {summary['mean_occupancy']:.0%}", flush=True)
    document = {"machine": machine(), "command": command_line(argv),
                "sla": asdict(sla), "settings": runtime.params, "arms": results, "decode_speed": speed}
    (out / "results.json").write_text(json.dumps(document, indent=2))
    (out / "raw_timings.json").write_text(json.dumps(raw))
    report = write_generate_report(out, document)
    print(f"[perf-generate] report: {report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
