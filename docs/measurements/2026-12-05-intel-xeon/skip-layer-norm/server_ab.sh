#!/bin/bash
# Alternating server starts: A = SkipLayerNormFusion on (CPU_SLOWER_FUSIONS = (), as before),
# B = left out (the change). Per start: 10-s closed loops of held-out texts at c=1, c=4, c=16 (server_probe.py).
cd /work/main
P=docs/measurements/2026-12-04-amd-epyc-zen4/server_probe.py
F=scripts/contracts/onnx_sessions.py
cp $F /tmp/onnx_sessions.py.keep
for round in 1 2 3; do
  for v in A B; do
    .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
    cp /tmp/onnx_sessions.py.keep $F
    [ $v = A ] && sed -i 's/^CPU_SLOWER_FUSIONS = ("SkipLayerNormFusion",)$/CPU_SLOWER_FUSIONS = ()/' $F
    (.venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
    for t in $(seq 120); do curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null && break; sleep 1; done
    sleep 3
    w1=$(.venv/bin/python $P 8000 8002 1 10 2>&1 | head -2 | tr '\n' ' ')
    w4=$(.venv/bin/python $P 8000 8002 4 10 2>&1 | head -2 | tr '\n' ' ')
    w16=$(.venv/bin/python $P 8000 8002 16 10 2>&1 | head -2 | tr '\n' ' ')
    echo "round $round $v ($(grep -c '^CPU_SLOWER_FUSIONS = ()' $F) = fusion on) | c=1 $w1 | c=4 $w4 | c=16 $w16"
  done
done
cp /tmp/onnx_sessions.py.keep $F
.venv/bin/python -m serving stop >/dev/null 2>&1
