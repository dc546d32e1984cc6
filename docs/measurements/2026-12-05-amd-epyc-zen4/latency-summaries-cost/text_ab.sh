#!/bin/bash
# The served text_embedder with the served latency-summary quantiles against none, alternating, each
# run a fresh `serving serve` driven by the perf suite's closed loop (this project only) at c = 1, 16
# and 32, 10-s windows. The "none" config is serving.toml with `latency_summary_quantiles = []`,
# written next to it for the run and removed after.
cd "$(dirname "$0")/../../../.."
sed 's/^latency_summary_quantiles = .*/latency_summary_quantiles = []/' model_repository/serving.toml > model_repository/serving-nosummaries.toml
trap 'rm -f model_repository/serving-nosummaries.toml' EXIT
for v in served none served none; do
  cfg=model_repository/serving.toml; [ $v = none ] && cfg=model_repository/serving-nosummaries.toml
  echo "== summaries $v ($cfg) $(date -u +%H:%M:%S)"
  timeout 600 .venv/bin/python -m perf_sweep peers --config $cfg --targets this_project --models text_embedder \
      --concurrencies 1 16 32 --window-s 10 --out-root /tmp/summaries-text-ab 2>&1 \
    | grep -E "this_project .* c=" | sed -E 's/sent [0-9]+ = warm-up [0-9]+ \+ //; s/; client CPU.*//'
done
