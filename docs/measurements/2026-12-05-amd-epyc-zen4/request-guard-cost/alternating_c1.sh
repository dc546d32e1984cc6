#!/bin/bash
cd /work/main
PA=".venv/bin/python -m perf_sweep analyzer --"
for round in 1 2 3 4; do
  for mode in on off; do
    if [ $mode = off ]; then sed -i 's/(REQUEST_GUARD, True, "on"))/(REQUEST_GUARD, False, "on"))/' scripts/serving/runtime/native.py; fi
    .venv/bin/python -m serving serve --config model_repository/serving.toml >/dev/null 2>&1
    git checkout -q scripts/serving/runtime/native.py
    sleep 3
    for proto in "http 8000" "grpc 8001"; do
      set -- $proto
      out=$($PA -m digit_classifier -i $1 -u 127.0.0.1:$2 --concurrency-range 1 --measurement-interval 5000 2>&1 | grep "Concurrency:" | sed 's/.*latency //')
      echo "round=$round guard=$mode digit $1 c=1 latency $out"
    done
    .venv/bin/python -m serving stop >/dev/null 2>&1
  done
done
