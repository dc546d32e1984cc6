#!/bin/bash
# Alternating server starts with the code itself: A = FILES at BASE, B = the working tree. Per start:
# 10-s levels through ../session-settling/server_probe.py. Usage: code_ab.sh ROUNDS, with (defaults):
#   BASE=beda13c   FILES= the six files of a97a116 (fewer numpy calls)   LEVELS="c=1 c=4 c=16"
# a LEVEL `digits:c=1` probes digit_classifier, plain `c=1` text_embedder. Runs kept (cold-numpy/README.txt):
#   code_ab.sh 3 (code-ab.txt);
#   BASE=bd44ac4 FILES="scripts/serving/backend/stub_metrics.py scripts/serving/backend/triton_backends/onnxruntime_cpu/model.py"
#   LEVELS="c=1 digits:c=1 digits:c=1" code_ab.sh 4 (metrics-later-ab.txt)
cd /work/main
P=docs/measurements/2026-12-05-intel-xeon/session-settling/server_probe.py
BASE=${BASE:-beda13c}
FILES=${FILES:-"scripts/contracts/sequence_buckets.py scripts/contracts/token_padding.py scripts/serving/backend/batch_execution.py
scripts/serving/backend/checks.py scripts/serving/backend/text_frontend.py scripts/serving/backend/triton_backends/onnxruntime_cpu/model.py"}
LEVELS=${LEVELS:-"c=1 c=4 c=16"}
rm -rf /tmp/exp/ab && mkdir -p /tmp/exp/ab/A /tmp/exp/ab/B
for f in $FILES; do mkdir -p /tmp/exp/ab/A/$(dirname $f) /tmp/exp/ab/B/$(dirname $f); git show $BASE:$f > /tmp/exp/ab/A/$f; cp $f /tmp/exp/ab/B/$f; done
trap 'for f in $FILES; do cp /tmp/exp/ab/B/$f $f; done; .venv/bin/python -m serving stop >/dev/null 2>&1' EXIT
for round in $(seq ${1:-3}); do
  for v in A B; do
    for f in $FILES; do cp /tmp/exp/ab/$v/$f $f; done
    .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
    (.venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
    for t in $(seq 90); do curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null && break; sleep 1; done
    sleep 3
    echo "round $round $v"
    for level in $LEVELS; do
      model=text; [[ $level == digits:* ]] && model=digits
      echo -n "$model "
      (cd $(dirname $P) && /work/main/.venv/bin/python server_probe.py 8000 8002 ${level#digits:} 10 $model 2>&1 | tail -1)
    done
  done
done
