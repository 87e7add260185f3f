#!/usr/bin/env bash
# Makes sure the system tools the local stack needs exist: Python >= 3.11 with venv, Java 17+, Maven,
# and bubblewrap (the sandbox of model-written code: environments/isolation.py).
# With --browser also Chromium, which the report test renders the HTML report in (headless).
# As root with apt-get it installs what is missing; otherwise it names the fix and fails.
set -euo pipefail

missing=()
python3 -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || missing+=(python3 python3-venv)
java_major=$(java -version 2>&1 | sed -nE 's/.*version "(1\.)?([0-9]+).*/\2/p' | head -n1 || true)
[ -n "${java_major}" ] && [ "${java_major}" -ge 17 ] || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
[ -n "${FLYWHEEL_BWRAP:-}" ] || command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
if [ "${1:-}" = --browser ]; then
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
fi

[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing system packages: ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
else
  echo "missing: ${missing[*]} — install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}) and rerun" >&2
  exit 1
fi
