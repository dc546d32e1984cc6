#!/usr/bin/env bash
# A second tree to serve beside the main checkout for an interleaved A/B (interleaved_ab.py A_PORT B_PORT ...).
#
# Usage (from the main checkout, after `make setup` and `make build-engines`):
#   bash docs/measurements/2026-12-04-amd-epyc-zen4/make_ab_copy.sh DEST [REV]
#   (edit DEST's scripts/ or model_repository/serving.toml: that is the B side)
#   cd DEST && DEST/.venv/bin/python -m serving serve --config model_repository/serving.toml --run-dir DEST/run
#
# Why a venv of its own: Triton's Python backend stub runs its interpreter isolated (it ignores
# PYTHONPATH) and finds its packages through the `python` first on PATH, i.e. the venv that started
# the server. With the main checkout's venv, whose editable install maps `serving` and `contracts` to
# the main checkout, a copy's stubs import every backend module from the MAIN tree; only the
# backend's model.py (copied into the run directory) and the runtime come from the copy. This venv
# puts the copy's source folders first and then reads the main venv's site-packages (no install).
# Since the model.py files append the runtime's PYTHONPATH to the stub's sys.path, a copy of a tree
# that has them imports its own code either way; the venv keeps copies of older trees honest too.
set -euo pipefail
dest=${1:?usage: make_ab_copy.sh DEST [REV]}
rev=${2:-}
main=$(git rev-parse --show-toplevel)
mkdir -p "$dest"
if [ -n "$rev" ]; then
  git -C "$main" archive "$rev" scripts build clients deploy Makefile pyproject.toml | tar -x -C "$dest"
else
  for d in scripts build clients deploy; do rm -rf "${dest:?}/$d"; cp -r "$main/$d" "$dest/$d"; done
  cp "$main/Makefile" "$main/pyproject.toml" "$dest/"
fi
rm -rf "$dest/model_repository" && cp -r "$main/model_repository" "$dest/model_repository"
ln -sfn "$main/artifacts" "$dest/artifacts"
base=$(sed -n 's/^executable = //p' "$main/.venv/pyvenv.cfg")
rm -rf "$dest/.venv" && "$base" -m venv --without-pip "$dest/.venv"
pyver=$("$dest/.venv/bin/python" -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')
ln -sfn "$main/.venv/lib/triton-serving" "$dest/.venv/lib/triton-serving"   # the preloaded native helpers
printf '%s\n' "$dest/scripts" "$dest/build" "$dest/clients" "$dest/deploy" \
  "import site; site.addsitedir('$main/.venv/lib/$pyver/site-packages')" > "$dest/.venv/lib/$pyver/site-packages/00-ab-copy.pth"
# ports 19000-19012 and supervisor 19090, so that both trees can serve at once
python3 - "$dest/model_repository/serving.toml" <<'PY'
import re, sys
path = sys.argv[1]; text = open(path).read()
for key, port in (("http_port", 19000), ("grpc_port", 19001), ("metrics_port", 19002)):
    text = re.sub(rf"^{key} = \d+", f"{key} = {port}", text, count=1, flags=re.M)
text = re.sub(r"^\[server\]\n", "[server]\nsupervisor_metrics_port = 19090\n", text, count=1, flags=re.M)
open(path, "w").write(text)
PY
"$dest/.venv/bin/python" -c 'import serving, sys; print("B imports serving from", serving.__path__[0], "(python", sys.prefix + ")")'
