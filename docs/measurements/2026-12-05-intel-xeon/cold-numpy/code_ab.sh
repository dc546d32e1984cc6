#!/bin/bash
# Alternating server starts with the code itself: A = the backend's files at HEAD (beda13c), B = the
# working tree (fewer numpy calls per execution: cold-numpy/README.txt). Per start: 10-s closed loops of
# held-out texts at c=1, c=4 and c=16 (../session-settling/server_probe.py). Usage: code_ab.sh ROUNDS
cd /work/main
P=docs/measurements/2026-12-05-intel-xeon/session-settling/server_probe.py
FILES="scripts/contracts/sequence_buckets.py scripts/contracts/token_padding.py scripts/serving/backend/batch_execution.py
scripts/serving/backend/checks.py scripts/serving/backend/text_frontend.py scripts/serving/backend/triton_backends/onnxruntime_cpu/model.py"
rm -rf /tmp/exp/ab && mkdir -p /tmp/exp/ab/A /tmp/exp/ab/B
for f in $FILES; do mkdir -p /tmp/exp/ab/A/$(dirname $f) /tmp/exp/ab/B/$(dirname $f); git show beda13c:$f > /tmp/exp/ab/A/$f; cp $f /tmp/exp/ab/B/$f; done
trap 'for f in $FILES; do cp /tmp/exp/ab/B/$f $f; done; .venv/bin/python -m serving stop >/dev/null 2>&1' EXIT
for round in $(seq ${1:-3}); do
  for v in A B; do
    for f in $FILES; do cp /tmp/exp/ab/$v/$f $f; done
    .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
    (.venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
    for t in $(seq 90); do curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null && break; sleep 1; done
    sleep 3
    echo "round $round $v"
    for level in c=1 c=4 c=16; do (cd $(dirname $P) && /work/main/.venv/bin/python server_probe.py 8000 8002 $level 10 2>&1 | tail -1); done
  done
done
