"""Does a 2-thread ONNX Runtime session beat a 1-thread one right now? Sampled over time, no server.

The served text_embedder file, one 96-token input, 25 timed runs per session per sample (medians), a
sample every INTERVAL_S seconds for MINUTES minutes. Prints the speed-up of 2 threads per sample.
The sessions, input and timing are spell_check.py's (one copy). Run from the repository root with
nothing else running:
    .venv/bin/python docs/measurements/2026-12-05-amd-epyc-zen4/two_thread_spells.py [MINUTES] [INTERVAL_S]
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from spell_check import feeds_for, median_ms, session  # noqa: E402

MINUTES = float(sys.argv[1]) if len(sys.argv) > 1 else 6
INTERVAL_S = float(sys.argv[2]) if len(sys.argv) > 2 else 10

sessions = {2: session(2), 1: session(1)}
feeds = feeds_for(sessions[1])
end = time.time() + 60 * MINUTES
while time.time() < end:
    two, one = median_ms(sessions[2], feeds), median_ms(sessions[1], feeds)
    print(f"{time.strftime('%H:%M:%S')} 2 threads {two:6.2f} ms  1 thread {one:6.2f} ms  speed-up x{one / two:.2f}",
          flush=True)
    time.sleep(INTERVAL_S)
