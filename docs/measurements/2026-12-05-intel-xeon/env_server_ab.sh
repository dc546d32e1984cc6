#!/bin/bash
# Alternating server starts of this tree with one environment variable set to A, then B, read by a throwaway
# change (http-threads/http-threads.diff: AB_HTTP_THREADS -> Triton's --http-thread-count; stub-priority/
# stub-sched.diff: AB_STUB_SCHED -> the backend stubs' compute thread at "nice5" / "batch"); "" = unset.
# Usage: env_server_ab.sh VAR A B ROUNDS LEVEL...   (LEVEL: c=N or p=RATE, 10 s each, server_probe.py;
# MODEL=digits for the digit classifier). Each line names the variable's value and, for the stubs, their
# threads' nice values. (The two A/Bs of 2026-12-06 ran through one copy of this script each, merged afterwards.)
var=${1:?usage: env_server_ab.sh VAR A B ROUNDS LEVEL...}; a=$2; b=$3; rounds=$4; shift 4; levels=("$@")
cd /work/main
probe=docs/measurements/2026-12-05-intel-xeon/session-settling/server_probe.py
trap '.venv/bin/python -m serving stop >/dev/null 2>&1' EXIT
serve_with() {
  .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
  (env "$var=$1" .venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
  until curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null && curl -sf localhost:8000/v2/models/digit_classifier/ready >/dev/null; do sleep 1; done; sleep 3
}
for round in $(seq $rounds); do
  for variant in "A:$a" "B:$b"; do
    serve_with "${variant#*:}"
    stub=$(pgrep -f 'triton_python_backend_stub.*text_embedder' | head -1)
    echo "round $round ${variant%%:*} ($var=${variant#*:}; $(ls /proc/$(pgrep -f tritonserver | head -1)/task | wc -l) threads in tritonserver; a text stub's threads' nice values: $(ps -L -o ni= -p $stub | sort | uniq -c | xargs))"
    for level in "${levels[@]}"; do .venv/bin/python $probe 8000 8002 $level 10 $MODEL 2>&1 | tail -1; done
  done
done
