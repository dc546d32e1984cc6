#!/bin/bash
# Alternating server starts with Triton's --http-thread-count A vs B (an env var read by a throwaway
# change of serving/runtime/server.py, http-threads.diff; "" = Triton's default, 8).
# Usage: server_ab.sh A B ROUNDS LEVEL...  (LEVEL: c=N or p=RATE, 10 s each; add "digits" as MODEL via MODEL=digits)
a=$1; b=$2; rounds=$3; shift 3; levels=("$@")
cd /work/main
probe=docs/measurements/2026-12-05-intel-xeon/session-settling/server_probe.py
trap '.venv/bin/python -m serving stop >/dev/null 2>&1' EXIT
serve_with() {
  .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
  (AB_HTTP_THREADS=$1 .venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
  until curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null && curl -sf localhost:8000/v2/models/digit_classifier/ready >/dev/null; do sleep 1; done; sleep 3
}
for round in $(seq $rounds); do
  for variant in "A:$a" "B:$b"; do
    serve_with "${variant#*:}"
    echo "round $round ${variant%%:*} (http threads: ${variant#*:}; $(pgrep -f tritonserver | head -1 | xargs -I{} sh -c 'ls /proc/{}/task | wc -l') threads in tritonserver)"
    for level in "${levels[@]}"; do .venv/bin/python $probe 8000 8002 $level 10 $MODEL 2>&1 | tail -1; done
  done
done
