"""How repeatable is the peer suite's host probe (perf_sweep.peers.machine.ParallelismProbe, the served text
file at 64 tokens, 9 alternating calls each)? GROUPS groups of 10 probes back to back, PAUSE s apart, nothing
else running: the spread of `one_thread_ms` within a group (the probe's own noise) and between groups (the
host's drift). Usage: python probe_repeat.py GROUPS PAUSE_S"""
import sys, time, statistics
sys.path.insert(0, "/work/main/scripts")
from perf_sweep.peers import machine
from perf_sweep.peers.references import probe_feeds
from perf_sweep.peers.served_files import ServedFiles
import json
from pathlib import Path

texts = json.load(open("/work/main/artifacts/text_encoder/text_corpus.json"))["heldout"]
repo = Path("/work/main/model_repository")
files = ServedFiles(repo / "digit_classifier/1/model.onnx", repo / "text_embedder/1/model.onnx",
                    repo / "text_embedder/1/tokenizer.json", 128)
groups, pause = int(sys.argv[1]), float(sys.argv[2])
probe = machine.ParallelismProbe(files.text_onnx, probe_feeds(files, texts), 2)
for g in range(groups):
    ones = [probe.measure().one_thread_ms for _ in range(10)]
    print(f"{time.strftime('%H:%M:%S')} group {g}: one_thread_ms median {statistics.median(ones):.3f}, "
          f"min {min(ones):.3f}, max {max(ones):.3f} (max/min {max(ones) / min(ones):.3f})", flush=True)
    time.sleep(pause)
