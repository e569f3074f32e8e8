#!/usr/bin/env bash
# Refresh ci/constraints.txt, the lock that ci/setup.sh installs from: a throw-away venv gets
# the newest versions setup.cfg allows (gpuvalues[test], plus the build backend pyproject.toml
# names), and the file pins exactly what resolved. Run it, run ci/test.sh, commit both.
#   bash ci/lock.sh          (needs only PyPI; takes about a minute)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet --upgrade pip "setuptools>=68" wheel
"$tmp/venv/bin/python" -m pip install --quiet "$ROOT[test]"
{
  echo "# The lock: exact versions ci/setup.sh installs (pip -c, also for the build backend)."
  echo "# Made by ci/lock.sh with $("$PY" --version) on $(date -u +%Y-%m-%d); refresh with it, never by hand."
  "$tmp/venv/bin/python" -m pip freeze --all | grep -v -i '^gpuvalues[=@ ]'
} >"$ROOT/ci/constraints.txt"
echo "lock: wrote ci/constraints.txt ($(grep -vc '^#' "$ROOT/ci/constraints.txt") packages)"
