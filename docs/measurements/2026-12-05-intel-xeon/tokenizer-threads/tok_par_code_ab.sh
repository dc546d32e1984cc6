#!/bin/bash
# Alternating server starts with the code itself: A = text_frontend.py at c5ad878 (the tokenizer's Rust pool),
# B = the front-end setting TOKENIZERS_PARALLELISM=false in its process. Per start: 10-s closed loops of
# held-out texts at c=16, then c=4 (server_probe.py); the text_embedder stub's thread count after them.
cd /work/main
P=docs/measurements/2026-12-04-amd-epyc-zen4/server_probe.py
F=scripts/serving/backend/text_frontend.py
unset TOKENIZERS_PARALLELISM
for round in 1 2 3; do
  for v in A B; do
    cp /tmp/exp/tf_$([ $v = A ] && echo old || echo new).py $F
    .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
    (.venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
    for t in $(seq 90); do curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null && break; sleep 1; done
    sleep 3
    w16=$(.venv/bin/python $P 8000 8002 16 10 2>&1 | head -2 | tr '\n' ' ')
    w4=$(.venv/bin/python $P 8000 8002 4 10 2>&1 | head -2 | tr '\n' ' ')
    threads=$(for s in $(pgrep -f "triton_python_backend_stub.*text_embedder"); do ls /proc/$s/task | wc -l; done | tr '\n' '/')
    echo "round $round $v (stub threads $threads) | c=16 $w16 | c=4 $w4"
  done
done
cp /tmp/exp/tf_new.py $F
.venv/bin/python -m serving stop >/dev/null 2>&1
