#!/bin/bash
# A/B of the request guard's cost: the same served models, guard off / on alternately.
cd /work/main
PA=".venv/bin/python -m perf_sweep analyzer --"
python3 - <<'PY'
import json
PY
.venv/bin/python -m perf_sweep inputs text --out /tmp/guard-ab/texts.json --count 200 >/dev/null 2>&1
for round in 1 2; do
  for mode in off on; do
    if [ $mode = off ]; then sed -i 's/(REQUEST_GUARD, True, "on"))/(REQUEST_GUARD, False, "on"))/' scripts/serving/runtime/native.py; fi
    .venv/bin/python -m serving serve --config model_repository/serving.toml >/dev/null 2>&1
    git checkout -q scripts/serving/runtime/native.py
    guard=$(tr '\0' '\n' < /proc/$(pgrep -f "tritonserver.*--http-port=8000" | head -1)/environ | grep -c SERVING_REQUEST_GUARD)
    for spec in "digit_classifier grpc 8001 1" "digit_classifier http 8000 1" "digit_classifier grpc 8001 8" "text_embedder grpc 8001 1"; do
      set -- $spec
      extra=""; [ $1 = text_embedder ] && extra="--input-data /tmp/guard-ab/texts.json"
      out=$($PA -m $1 -i $2 -u 127.0.0.1:$3 --concurrency-range $4 --measurement-interval 4000 $extra 2>&1 | grep "Concurrency:")
      echo "round=$round guard=$mode(env:$guard) $1 $2 c=$4 :: $out"
    done
    .venv/bin/python -m serving stop >/dev/null 2>&1
  done
done
