#!/bin/bash
# arm: A (as is), B (supervisor nice 19), C (supervisor pinned to the noisy partition's home core)
cd /work/main
arm=$1
( for i in $(seq 1 200); do
    p=$(pgrep -f "serving supervise" -n); 
    if [ -n "$p" ]; then
      sleep 1.5
      rd=$(tr '\0' '\n' < /proc/$p/cmdline | grep -A1 -- "--run-dir" | tail -1)
      noisy=$(python3 -c "import json,sys;m=json.load(open('$rd/manifest.json'));print(','.join(map(str,m['partitions']['noisy']['home_cpus'] if 'home_cpus' in m['partitions']['noisy'] else m['partitions']['noisy']['cpus'])))" 2>/dev/null)
      case $arm in B) renice -n 19 -p $p >/dev/null; for t in /proc/$p/task/*; do renice -n 19 -p ${t##*/} >/dev/null 2>&1; done;; C) taskset -apc 0 $p >/dev/null;; esac
      echo "arm $arm sup $p noisy_cpus ${noisy} rd $rd" >> /tmp/m/sup_ab.log; break
    fi; sleep 0.1; done ) &
.venv/bin/python -m pytest -q -s -p no:warnings tests/integration/test_partitions.py -k noisy 2>&1 | grep -oE "quiet P99.*\(x[0-9.]+\)|first run x[0-9.]+" | sed "s/^/$arm /"
wait
