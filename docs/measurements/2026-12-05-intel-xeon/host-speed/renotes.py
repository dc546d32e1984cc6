"""Issue 10's per-concurrency verdicts of a kept perf-peers run re-derived from its levels.jsonl with
the host-speed note added on 2026-12-06 (perf_sweep.peers.verdicts._host_note), the lines that carry one.
Usage: python renotes.py PEERS_FOLDER..."""
import json, sys
sys.path.insert(0, "/work/main/scripts")
from perf_sweep.peers.stats import LevelSummary
from perf_sweep.peers.verdicts import concurrency_verdicts, p50_verdict

for folder in sys.argv[1:]:
    levels = [LevelSummary.from_dict(json.loads(line)) for line in open(f"{folder}/levels.jsonl")]
    print(f"# {folder}")
    for model, unit in (("digit_classifier", "images/s"), ("text_embedder", "texts/s")):
        for v in concurrency_verdicts(levels, model, unit) + [p50_verdict(levels, model)]:
            if "another speed" in v.text or "host differed" in v.text:
                print(v.headline)
