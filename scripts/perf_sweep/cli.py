"""`python -m perf_sweep run|inputs|report|write-back|peers|analyzer`.

run         sweeps against the running servers (run/manifest.json), A/B block, report
inputs      only generate the perf_analyzer input files (digit images or long-tailed texts)
report      re-render report.md and the PNGs of an earlier run folder
write-back  set [models.<name>] max_queue_delay_microseconds in serving.toml
peers       this project against the peers (minimal FastAPI, PyTriton, infinity-emb) on the same
            ONNX files, inputs and client (`make perf-peers`; needs `make setup-peers`)
analyzer    perf_analyzer itself, with the library path the wheel's binary needs (libcudart.so.12
            from nvidia-cuda-runtime-cu12): `python -m perf_sweep analyzer -- -m digit_classifier ...`
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from perf_sweep.errors import PerfSweepError
from contracts.command_line import run_subcommand


def _run(args: argparse.Namespace) -> int:
    from perf_sweep.campaign import CampaignOptions, run_campaign
    from perf_sweep.plan import Measurement

    settings: dict = {"command": "python -m perf_sweep " + " ".join(sys.argv[1:] if args.argv is None else args.argv)}
    if args.quick:
        settings.update(measurement=Measurement(interval_ms=1000, stability_percentage=25, max_trials=4, warmup_requests=20),
                        max_concurrency=8, rate_fractions=(0.5, 1.0), delays_ms=(0, 10), loadgen_seconds=3.0)
    if args.max_concurrency is not None:  # 0 reaches the options' check instead of meaning "default"
        settings["max_concurrency"] = args.max_concurrency
    if args.models:
        settings["models"] = tuple(args.models)
    if args.no_ab:
        settings["ab_model"] = None
    elif args.ab_model:
        settings["ab_model"] = args.ab_model
    for name in ("config", "manifest", "out_root"):
        if getattr(args, name):
            settings[name] = Path(getattr(args, name)).resolve()
    settings["write_back"] = args.write_back
    settings["peers"], settings["peers_quick"] = not args.no_peers, args.quick
    settings["seed"] = args.seed
    try:
        run_campaign(CampaignOptions(**settings), progress=lambda line: print(line, flush=True))
    except KeyboardInterrupt:  # every server and perf_analyzer it started is stopped on the way out
        print("\n[perf] interrupted: no report was written; perf_analyzer's outputs of the levels measured so far are "
              "under raw/ of the run folder printed above.", file=sys.stderr, flush=True)
        return 130
    return 0


def _inputs(args: argparse.Namespace) -> int:
    from perf_sweep import inputs as gen

    out = Path(args.out)
    if args.kind == "image":
        images = gen.sample_digit_images(gen.load_test_split_images(Path(args.test_split)), args.count, args.seed)
        gen.write_input_data(out, gen.image_input_data(images, args.input_name or "image"))
        print(f"wrote {len(images)} images to {out}")
        return 0
    from contracts.serving_spec import load_serving_spec
    from perf_sweep.campaign import text_max_tokens

    max_tokens = text_max_tokens(load_serving_spec(Path(args.config)), args.max_tokens)  # as `make perf` generates them
    tokenizer = gen.minilm_tokenizer()
    texts, _ = gen.long_tailed_texts(args.count or 400, max_tokens, tokenizer, args.seed, Path(args.site_packages))
    gen.write_input_data(out, gen.string_input_data(texts, args.input_name or "TEXT"))
    summary = gen.LengthSummary.of([tokenizer.count(t) for t in texts], max_tokens)
    print(f"wrote {len(texts)} texts to {out}: {json.dumps(summary.__dict__)}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from perf_sweep.report import read_latency_samples, write_report

    from contracts.perf_results import read_perf_results

    folder = Path(args.folder)
    print(write_report(folder, read_perf_results(folder), read_latency_samples(folder)))
    return 0


def _write_back(args: argparse.Namespace) -> int:
    from perf_sweep.writeback import write_queue_delay

    print(f"updated {write_queue_delay(Path(args.config), args.model, args.delay_us)}; served once the configs are "
          f"rendered again: `make serve` does it (the build is cached), or `make build-engines` and restart the servers")
    return 0


def _analyzer(args: argparse.Namespace) -> int:
    """Replace this process with perf_analyzer: its exit status and output are perf_analyzer's own."""
    import os

    from perf_sweep.plan import find_perf_analyzer, perf_analyzer_environment

    binary = find_perf_analyzer()
    arguments = args.arguments[1:] if args.arguments[:1] == ["--"] else args.arguments
    os.execve(binary, [str(binary), *arguments], perf_analyzer_environment())
    return 0  # not reached


def main(argv: list[str] | None = None) -> int:
    import sysconfig

    from contracts.onnx_sessions import keep_onnxruntime_offline

    keep_onnxruntime_offline()  # before anything imports onnxruntime (in-process limits, peers, padding report)

    from contracts.digit_split import digit_test_split_path
    from contracts.layout import ARTIFACTS_DIR, SERVING_CONFIG

    parser = argparse.ArgumentParser(prog="perf_sweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="sweep the running servers and write reports/perf/<timestamp>/")
    run.add_argument("--quick", action="store_true", help="short windows and fewer levels (a smoke run, ~4 min; ~9 min with the peers section)")
    run.add_argument("--models", nargs="+", help="only these served models (default: all in the manifest)")
    run.add_argument("--max-concurrency", type=int,
                     help="highest closed-loop level; the levels double from 1 and end at it: 1, 2, 4, ..., N (default 32; --quick: 8)")
    run.add_argument("--ab-model", help="model for the A/B block (default digit_classifier)")
    run.add_argument("--no-ab", action="store_true", help="skip the A/B block (temporary server)")
    run.add_argument("--write-back", action="store_true", help="write the chosen max_queue_delay into serving.toml")
    run.add_argument("--no-peers", action="store_true", help="skip the peer comparison section (perf_sweep peers)")
    run.add_argument("--config", help="serving.toml (default model_repository/serving.toml)")
    run.add_argument("--manifest", help="run/manifest.json of the running servers")
    run.add_argument("--out-root", help="parent of the timestamped run folder (default reports/perf)")
    run.add_argument("--seed", type=int, default=0, help="seed of the generated inputs and the Poisson arrivals")
    run.set_defaults(func=_run, argv=argv)
    inp = sub.add_parser("inputs", help="write a perf_analyzer --input-data JSON file")
    inp.add_argument("kind", choices=["image", "text"], help="held-out digit images, or long-tailed real sentences")
    inp.add_argument("--out", required=True, help="the JSON file to write")
    inp.add_argument("--input-name", help="model input name (default image / TEXT)")
    inp.add_argument("--count", type=int, help="how many samples (default: every test-split image, in a seeded order; 400 texts)")
    inp.add_argument("--seed", type=int, default=0, help="which samples and texts are drawn")
    inp.add_argument("--max-tokens", type=int,
                     help="longest text in tokens (default: the served text models' max_length, as `make perf` uses)")
    inp.add_argument("--config", default=str(SERVING_CONFIG),
                     help="serving.toml the default --max-tokens is read from")
    inp.add_argument("--test-split", default=str(digit_test_split_path(ARTIFACTS_DIR)),
                     help="the digit test split images are drawn from")
    inp.add_argument("--site-packages", default=sysconfig.get_paths()["purelib"],
                     help="where the installed packages whose docs the sentences come from live")
    inp.set_defaults(func=_inputs)
    rep = sub.add_parser("report", help="re-render report.md and plots of a run folder")
    rep.add_argument("folder", help="a run folder of `perf_sweep run` (holds results.json)")
    rep.set_defaults(func=_report)
    wb = sub.add_parser("write-back", help="set a model's max_queue_delay_microseconds in serving.toml")
    wb.add_argument("--model", required=True, help="a model of serving.toml")
    wb.add_argument("--delay-us", type=int, required=True, help="max_queue_delay_microseconds to write (>= 0)")
    wb.add_argument("--config", default=str(SERVING_CONFIG), help="the serving.toml to edit")
    wb.set_defaults(func=_write_back)
    analyzer = sub.add_parser("analyzer", help="run perf_analyzer with the library path its wheel needs (arguments after --)")
    analyzer.add_argument("arguments", nargs=argparse.REMAINDER, help="perf_analyzer's own arguments, e.g. -- -m digit_classifier")
    analyzer.set_defaults(func=_analyzer)
    from perf_sweep.peers.cli import add_peers_parser

    add_peers_parser(sub)
    from contracts.errors import ServingError  # config and server-start errors carry their own message

    return run_subcommand(parser, argv, (PerfSweepError, ServingError))
