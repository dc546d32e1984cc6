#!/usr/bin/env bash
# `uv pip install` into the venv of PYTHON, from the same places pip is configured to install from.
#
# Why a wrapper: uv does not read pip's configuration. On these machines pip finds the CPU build
# of torch in a local folder (find-links) and other wheels on local indexes (extra-index-url);
# uv given nothing would download a multi-GB CUDA build of torch from PyPI. So the locations are
# read from pip (its config files and PIP_* variables) and handed to uv. Every requirement is
# pinned (== in requirements/*.txt and requirements/constraints.txt), so considering all indexes
# for each package (--index-strategy unsafe-best-match, pip's own behaviour) cannot pick another
# release.
#
# usage: scripts/uv_install.sh PYTHON [uv pip install arguments ...]
set -euo pipefail
python="$1"
shift
uv="$(dirname "$python")/uv"
args=(--python "$python" --index-strategy unsafe-best-match --native-tls)
pip_setting() { "$python" -m pip config get "global.$1" 2>/dev/null || true; }
for link in $(pip_setting find-links) ${PIP_FIND_LINKS:-}; do args+=(--find-links "$link"); done
for url in $(pip_setting extra-index-url) ${PIP_EXTRA_INDEX_URL:-}; do args+=(--extra-index-url "$url"); done
index="${PIP_INDEX_URL:-$(pip_setting index-url)}"
if [ -n "$index" ]; then args+=(--index-url "$index"); fi
cert="${PIP_CERT:-$(pip_setting cert)}"
if [ -n "$cert" ]; then export SSL_CERT_FILE="$cert"; fi
exec "$uv" pip install --quiet "${args[@]}" "$@"
