#!/bin/bash
# Alternating server starts of this tree: A = session_choice's settle_calls 0 (the choice as before),
# B = 2 (the change). Per start: 10-s levels of held-out texts (server_probe.py): c=1, c=2, c=4,
# Poisson 150/s and 300/s. Run from anywhere; restores session_choice.py at the end.
cd /work/main
probe=docs/measurements/2026-12-05-intel-xeon/session-settling/server_probe.py
choice=scripts/serving/backend/session_choice.py
cp $choice /tmp/session_choice.py.keep
trap 'cp /tmp/session_choice.py.keep $choice; .venv/bin/python -m serving stop >/dev/null 2>&1' EXIT

serve_with_settle_calls() {  # restart `serving serve` with ChoicePolicy.settle_calls = $1, wait until ready
  .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
  sed "s/^    settle_calls: int = 2$/    settle_calls: int = $1/" /tmp/session_choice.py.keep > $choice
  (.venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
  until curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null; do sleep 1; done; sleep 3
}

for round in 1 2 3; do
  for variant in "A 0" "B 2"; do
    set -- $variant
    serve_with_settle_calls $2
    echo "round $round $1 (settle_calls $(sed -n 's/^    settle_calls: int = //p' $choice))"
    for level in c=1 c=2 c=4 p=150 p=300; do .venv/bin/python $probe 8000 8002 $level 10 2>&1 | tail -1; done
  done
done
