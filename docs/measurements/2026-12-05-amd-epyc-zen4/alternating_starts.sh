#!/bin/bash
# Alternating server starts: switch_margin 0.0 (A, the old rule) and 0.10 (B); two 10-s c=1 text windows each.
cd /work/main
F=scripts/serving/backend/session_choice.py
for round in 1 2 3 4 5 6; do
  for v in A B; do
    src=$([ $v = A ] && echo /tmp/abstarts/sc_old.py || echo /tmp/abstarts/sc_new.py)
    cp $src $F
    .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
    (.venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
    for t in $(seq 60); do curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null && break; sleep 1; done
    sleep 3
    w1=$(.venv/bin/python docs/measurements/2026-12-04-amd-epyc-zen4/server_probe.py 8000 8002 1 10 2>&1 | head -1)
    w2=$(.venv/bin/python docs/measurements/2026-12-04-amd-epyc-zen4/server_probe.py 8000 8002 1 10 2>&1 | head -1)
    sleep 1.3
    calls=$(curl -s localhost:8002/metrics | grep '^serving_framework_calls_total{model="text_embedder"' | sed 's/.*reason="\([a-z_]*\)",session="\([a-z]*\)".* \(.*\)/\2\/\1=\3/' | tr '\n' ' ')
    echo "round $round $v $src | $w1 | $w2 | $calls"
  done
done
cp /tmp/abstarts/sc_new.py $F
.venv/bin/python -m serving stop >/dev/null 2>&1
