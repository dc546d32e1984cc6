#!/bin/bash
# Alternating server starts of this tree with one ChoicePolicy default changed (serving/backend/session_choice.py).
# Usage: server_ab.sh FIELD A_VALUE B_VALUE ROUNDS LEVEL...   (LEVEL: c=N or p=RATE, 10 s each, server_probe.py)
# The runs kept here: `server_ab.sh settle_calls 0 2 3 c=1 c=2 c=4 p=150 p=300` (server-ab.txt, server-ab-2.txt;
# the script then had those values written in) and `server_ab.sh cold_calls 1 4 4 c=1 c=2 c=4 p=300`
# (cold-calls-ab.txt), `server_ab.sh switch_margin 0.0 0.05 4 c=1 c=1 c=2` (switch-margin-ab.txt; on a tree
# with a `switch_margin` field, since dropped); stop 40: `server_ab.sh confirm_calls 0 48 3 c=1 c=1 c=1 c=1 c=1 c=1`
# (confirm-calls-ab.txt) and `server_ab.sh fresh_calls 0 16 4 c=1 c=1` (fresh-calls-ab.txt).
# Restores session_choice.py at the end.
field=${1:?usage: server_ab.sh FIELD A_VALUE B_VALUE ROUNDS LEVEL...}; a=$2; b=$3; rounds=$4; shift 4; levels=("$@")
cd /work/main
probe=docs/measurements/2026-12-05-intel-xeon/session-settling/server_probe.py
choice=scripts/serving/backend/session_choice.py
cp $choice /tmp/session_choice.py.keep
trap 'cp /tmp/session_choice.py.keep $choice; .venv/bin/python -m serving stop >/dev/null 2>&1' EXIT

serve_with() {  # restart `serving serve` with ChoicePolicy.$field = $1, wait until ready
  .venv/bin/python -m serving stop >/dev/null 2>&1; sleep 2
  sed "s/^    $field: \(int\|float\) = .*$/    $field: \1 = $1/" /tmp/session_choice.py.keep > $choice
  (.venv/bin/python -m serving serve --config model_repository/serving.toml > /tmp/serve.log 2>&1 &)
  until curl -sf localhost:8000/v2/models/text_embedder/ready >/dev/null; do sleep 1; done; sleep 3
}

for round in $(seq $rounds); do
  for variant in "A:$a" "B:$b"; do
    serve_with ${variant#*:}
    echo "round $round ${variant%%:*} ($(grep "^    $field: " $choice | xargs))"
    for level in "${levels[@]}"; do .venv/bin/python $probe 8000 8002 $level 10 2>&1 | tail -1; done
  done
done
