#!/bin/bash
# Alternating server starts: the rendered text_embedder config as served (A, 2 instances) vs the
# same with a third instance group (B, rate-limiter priority 1000 like the second). Restores the config.
# Usage: server_ab.sh ROUNDS LEVEL...   (LEVEL: c=N or p=RATE, 10 s each, server_probe.py)
rounds=$1; shift; levels=("$@")
cd /work/main
probe=docs/measurements/2026-12-05-intel-xeon/session-settling/server_probe.py
cfg=model_repository/text_embedder/config.pbtxt
cp $cfg /tmp/text_embedder.config.keep
trap 'cp /tmp/text_embedder.config.keep $cfg; .venv/bin/python -m serving stop >/dev/null 2>&1' EXIT
python3 - <<'PY'
s = open("/tmp/text_embedder.config.keep").read()
group = 'instance_group {\n  count: 1\n  kind: KIND_CPU\n  rate_limiter {\n    priority: 1000\n  }\n}\n'
assert s.count(group) == 1
open("/tmp/text_embedder.config.three", "w").write(s.replace(group, group * 2))
PY
serve_with() {
  .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
  cp $1 $cfg
  (.venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
  until curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null; do sleep 1; done; sleep 3
}
for round in $(seq $rounds); do
  for variant in "A:/tmp/text_embedder.config.keep" "B:/tmp/text_embedder.config.three"; do
    serve_with ${variant#*:}
    echo "round $round ${variant%%:*} ($(grep -c instance_group $cfg) instance groups; $(pgrep -fc 'triton_python_backend_stub.*text_embedder') text_embedder stubs)"
    for level in "${levels[@]}"; do .venv/bin/python $probe 8000 8002 $level 10 2>&1 | tail -1; done
  done
done
