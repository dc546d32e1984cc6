#!/bin/bash
# alternate: current chooser (A) vs forced wide for lone calls (B); 60 s c=1 probe each
cd /work/main
for round in 1 2; do
 for v in A B; do
  .venv/bin/python -m serving stop --run-dir /tmp/s49 >/dev/null 2>&1
  if [ $v = B ]; then cp /tmp/c1/session_choice_forced.py scripts/serving/backend/session_choice.py; else git checkout -q scripts/serving/backend/session_choice.py; fi
  .venv/bin/python -m serving serve --run-dir /tmp/s49 --http-port 19100 --grpc-port 19101 --metrics-port 19102 --supervisor-metrics-port 19103 >/dev/null 2>&1
  sleep 5
  echo "== round $round variant $v $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  .venv/bin/python /tmp/c1/probe.py 19100 19102 60 | grep -v "^    "
 done
done
.venv/bin/python -m serving stop --run-dir /tmp/s49 >/dev/null 2>&1
git checkout -q scripts/serving/backend/session_choice.py
