#!/bin/bash
# Alternating server starts: A = the stub's tokenizer as today (TOKENIZERS_PARALLELISM unset: encode_batch
# on the Rust thread pool), B = TOKENIZERS_PARALLELISM=false in the server's environment (one thread).
# Per start: 10-s closed loops of held-out texts at c=16 and c=4 (server_probe.py).
cd /work/main
P=docs/measurements/2026-12-04-amd-epyc-zen4/server_probe.py
for round in 1 2 3; do
  for v in A B; do
    .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
    if [ $v = B ]; then export TOKENIZERS_PARALLELISM=false; else unset TOKENIZERS_PARALLELISM; fi
    (.venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
    for t in $(seq 90); do curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null && break; sleep 1; done
    sleep 3
    w16=$(.venv/bin/python $P 8000 8002 16 10 2>&1 | head -2 | tr '\n' ' ')
    w4=$(.venv/bin/python $P 8000 8002 4 10 2>&1 | head -2 | tr '\n' ' ')
    stub=$(pgrep -f "triton_python_backend_stub.*text_embedder" | head -1)
    env_seen=$(tr '\0' '\n' < /proc/$stub/environ | grep -c '^TOKENIZERS_PARALLELISM=false')
    echo "round $round $v (stub env has TOKENIZERS_PARALLELISM=false: $env_seen) | c=16 $w16 | c=4 $w4"
  done
done
unset TOKENIZERS_PARALLELISM
.venv/bin/python -m serving stop >/dev/null 2>&1
