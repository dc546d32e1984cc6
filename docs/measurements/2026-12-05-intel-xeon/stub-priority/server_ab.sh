#!/bin/bash
# Alternating server starts: the backend stubs' compute thread (and the ONNX Runtime workers it
# creates) at Triton's scheduling (A) vs another (B), through AB_STUB_SCHED read by a throwaway change of
# the backend's initialize (stub-sched.diff): "nice5", "batch" (SCHED_BATCH), "batch+nice5"; "" = as served.
# Usage: server_ab.sh A B ROUNDS LEVEL...   (LEVEL: c=N or p=RATE, 10 s each, server_probe.py; MODEL=digits for digits)
a=$1; b=$2; rounds=$3; shift 3; levels=("$@")
cd /work/main
probe=docs/measurements/2026-12-05-intel-xeon/session-settling/server_probe.py
trap '.venv/bin/python -m serving stop >/dev/null 2>&1' EXIT
serve_with() {
  .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
  (AB_STUB_SCHED=$1 .venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
  until curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null && curl -sf localhost:8000/v2/models/digit_classifier/ready >/dev/null; do sleep 1; done; sleep 3
}
for round in $(seq $rounds); do
  for variant in "A:$a" "B:$b"; do
    serve_with "${variant#*:}"
    stub=$(pgrep -f 'triton_python_backend_stub.*text_embedder' | head -1)
    echo "round $round ${variant%%:*} (AB_STUB_SCHED=${variant#*:}; a text stub's threads' nice values: $(ps -L -o ni= -p $stub | sort | uniq -c | xargs))"
    for level in "${levels[@]}"; do .venv/bin/python $probe 8000 8002 $level 10 $MODEL 2>&1 | tail -1; done
  done
done
