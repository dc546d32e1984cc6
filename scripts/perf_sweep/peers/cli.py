"""`python -m perf_sweep peers`: the peer comparison (`make perf-peers`); options and their parsing."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perf_sweep.peers.plan import ModelKind, SuiteTiming, TargetKind
from perf_sweep.peers.references import TextSource


def add_peers_parser(sub) -> None:
    peers = sub.add_parser("peers", help="this project against a minimal FastAPI server, PyTriton and infinity-emb "
                                         "(the same ONNX files, inputs and client); reports/perf/peers-<timestamp>/")
    peers.add_argument("--quick", action="store_true", help="c = 1, 4, 16 and one Poisson rate, 1 s + 2 s per level, "
                                                            "200 texts (a development smoke run, ~6 min)")
    peers.add_argument("--targets", nargs="+", choices=[t.value for t in TargetKind],
                       help="targets to measure (default all; this project is always measured)")
    peers.add_argument("--models", nargs="+", choices=[m.value for m in ModelKind], help="default both")
    peers.add_argument("--concurrencies", type=int, nargs="+", help="closed-loop levels (default 1 2 4 8 16 32)")
    peers.add_argument("--warmup-s", type=float, help="warm-up per level, excluded (default 2)")
    peers.add_argument("--window-s", type=float, help="measuring window per level (default 10)")
    peers.add_argument("--pytriton-delay-us", type=int, default=0,
                       help="PyTriton's DynamicBatcher max_queue_delay_microseconds (default 0, PyTriton's own default)")
    peers.add_argument("--texts", default=TextSource.HELDOUT.value, metavar="SOURCE",
                       help="the text workload: " + ", ".join(s.value for s in TextSource) + " (see "
                            "perf_sweep.peers.references.TextSource), or a file of your own: a JSON list of "
                            "strings, or one text per line (default heldout)")
    peers.add_argument("--text-count", type=int, help="texts to send (default all of the source)")
    peers.add_argument("--config", help="serving.toml (default model_repository/serving.toml)")
    peers.add_argument("--out-root", help="parent of the peers-<timestamp> folder (default reports/perf)")
    peers.add_argument("--peers-venv", help="the environment `make setup-peers` creates (default .venv/peers)")
    peers.add_argument("--seed", type=int, default=0)
    peers.set_defaults(func=run_peers_command)


def options_from_args(args: argparse.Namespace):
    from perf_sweep.peers.suite import PeerSuiteOptions

    timing = SuiteTiming.quick() if args.quick else SuiteTiming()
    changes = {k: v for k, v in {"concurrencies": tuple(args.concurrencies) if args.concurrencies else None,
                                 "warmup_s": args.warmup_s, "window_s": args.window_s}.items() if v is not None}
    settings: dict = {"timing": SuiteTiming(**{**timing.__dict__, **changes}), "seed": args.seed,
                      "pytriton_delay_us": args.pytriton_delay_us, "texts": args.texts,
                      "command": "python -m perf_sweep " + " ".join(sys.argv[1:])}
    if args.targets:
        settings["targets"] = tuple(TargetKind(t) for t in args.targets)
    if args.models:
        settings["models"] = tuple(ModelKind(m) for m in args.models)
    if args.text_count or args.quick:
        settings["text_count"] = args.text_count or 200
    for name in ("config", "out_root", "peers_venv"):
        if getattr(args, name):
            settings[name] = Path(getattr(args, name)).resolve()
    return PeerSuiteOptions(**settings)


def run_peers_command(args: argparse.Namespace) -> int:
    """The comparison; exit status 1 (after the report is written) when a target it was to measure
    was not measured: a ratio against fewer peers, or none at all for this project, is no pass."""
    from perf_sweep.errors import SweepRunError
    from perf_sweep.peers.suite import run_peer_suite

    opts = options_from_args(args)
    results = run_peer_suite(opts, progress=lambda line: print(line, flush=True))
    targets = results.get("targets") or {}
    failed = {name: entry.get("error", "unknown") for name, entry in targets.items() if not entry.get("measured")}
    # a target that started but lost levels (each recorded under level_errors) was not measured whole either
    failed.update({name: "levels failed: " + "; ".join(error.splitlines()[0] for error in entry["level_errors"])
                   for name, entry in targets.items() if entry.get("measured") and entry.get("level_errors")})
    if failed:
        raise SweepRunError("not every target was measured, so the comparison is incomplete: "
                            + "; ".join(f"{name}: {why}".splitlines()[0] for name, why in failed.items())
                            + f" (report: {opts.folder / 'report.md'}, logs: {opts.folder / 'logs'}).")
    return 0
