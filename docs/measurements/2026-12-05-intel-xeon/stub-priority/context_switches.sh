# Per thread of each text_embedder stub: voluntary and involuntary context switches and CPU ticks (utime+stime).
# Used as: bash context_switches.sh > before; server_probe.py 8000 8002 c=16 10; bash context_switches.sh > after
for pid in $(pgrep -f 'triton_python_backend_stub.*text_embedder'); do
  for t in /proc/$pid/task/*; do echo "$pid $(basename $t) $(grep -h ctxt $t/status | awk '{print $2}' | xargs) $(awk '{print $14+$15}' $t/stat)"; done
done
