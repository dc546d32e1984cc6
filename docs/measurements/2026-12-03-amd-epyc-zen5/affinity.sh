#!/bin/bash
# per process of tritonserver/stubs: the distinct Cpus_allowed_list of its threads, with counts
for p in $(pgrep -f "bin/tritonserver|triton_python_backend_stub"); do
  name=$(tr '\0' ' ' < /proc/$p/cmdline | grep -oE "model_repository/[a-z0-9_]+|tritonserver --model" | head -1)
  aff=$(for t in /proc/$p/task/*; do grep Cpus_allowed_list $t/status | cut -f2; done | sort | uniq -c | tr '\n' ';')
  echo "$p $name :: $aff"
done
