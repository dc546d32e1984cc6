#!/bin/bash
# Text c=1 in the server with the lone-call choice as served (chosen), forced wide, forced narrow:
# alternating server starts, 3 rounds, 10-s closed loop of held-out texts (server_probe.py).
cd /work/main
probe=docs/measurements/2026-12-05-intel-xeon/session-settling/server_probe.py
choice=scripts/serving/backend/session_choice.py
cp $choice /tmp/session_choice.py.keep
trap 'cp /tmp/session_choice.py.keep $choice; .venv/bin/python -m serving stop >/dev/null 2>&1' EXIT

serve_forcing() {  # restart `serving serve`; $1 = "" (as served), 0 (always wide) or 1 (always narrow) when alone
  .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
  if [ -z "$1" ]; then cp /tmp/session_choice.py.keep $choice
  else sed "s/^        self._best = best = 0 if wide_minus_narrow <= 0 else 1$/        self._best = best = $1/" /tmp/session_choice.py.keep > $choice; fi
  (.venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
  until curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null; do sleep 1; done; sleep 3
}

for round in 1 2 3; do
  for variant in "chosen:" "wide:0" "narrow:1"; do
    serve_forcing ${variant#*:}
    echo "round $round ${variant%%:*} ($(grep -c 'self._best = best = [01]$' $choice) forced)"
    .venv/bin/python $probe 8000 8002 c=1 10 2>&1 | tail -1
  done
done
