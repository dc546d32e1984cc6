cd /work/main
for v in 8 2 8 2 8; do
  echo "== http threads $v $(date -u +%H:%M:%S)"
  EXP_HTTP_THREADS=$v timeout 600 .venv/bin/python -m perf_sweep peers --config model_repository/serving.toml --targets this_project --concurrencies 1 16 --window-s 8 --out-root /tmp/drift/exp 2>&1 | grep -E "this_project .* c=" | sed -E 's/sent [0-9]+ = warm-up [0-9]+ \+ //; s/; client CPU.*//'
done
