#!/bin/bash
# usage: cpu_split.sh CONC WINDOW [paragraphs]
snap(){ for p in /proc/[0-9]*; do s=$(cat $p/stat 2>/dev/null) || continue; pid=${p#/proc/}; a=$(tr '\0' ' ' < $p/cmdline 2>/dev/null | cut -c1-150); echo "$pid $(echo "$s" | awk '{print $14+$15}') $a"; done; }
snap > /tmp/m/a.txt; t0=$(date +%s.%N)
cd /work/main && .venv/bin/python docs/measurements/2026-12-04-amd-epyc-zen4/server_probe.py 8000 8002 $1 $2 $3
t1=$(date +%s.%N); snap > /tmp/m/b.txt
python3 - "$t0" "$t1" <<'PY'
import sys
t=float(sys.argv[2])-float(sys.argv[1]); hz=100
a={l.split()[0]:(int(l.split()[1]),' '.join(l.split()[2:])) for l in open('/tmp/m/a.txt') if len(l.split())>1}
b={l.split()[0]:(int(l.split()[1]),' '.join(l.split()[2:])) for l in open('/tmp/m/b.txt') if len(l.split())>1}
rows=[]
for p,(v,c) in b.items():
    d=v-a.get(p,(0,))[0]
    if d>0: rows.append((d,p,c))
tot=sum(r[0] for r in rows)
print(f"elapsed {t:.1f}s, cpu {tot/hz:.1f}s of {2*t:.1f} core-s")
for d,p,c in sorted(rows,reverse=True)[:10]:
    name=c.split('/model_repository/')[1].split('/')[0] if 'model_repository/' in c and 'stub' in c else c[:60]
    print(f"{d/hz:6.2f}s {100*d/hz/t:5.1f}% core  {p} {name}")
PY
