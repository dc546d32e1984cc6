#!/usr/bin/env bash
# perf_analyzer (from the tritonclient wheel) links libb64.so.0d from Debian's libb64-0d, and the
# monitoring stack uses Debian's prometheus (prometheus + promtool). Install them when running as
# root; otherwise say exactly what to run. A second run finds them and does nothing.
set -euo pipefail
missing=()
dpkg -s libb64-0d >/dev/null 2>&1 || missing+=(libb64-0d)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: missing Debian packages ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
fi
