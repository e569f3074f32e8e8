#!/usr/bin/env bash
# Set up everything the project needs, idempotently: .venv with gpuvalues[test] (locked),
# pinned helm 4 / helm 3 / kubectl (sha256-verified) and prometheus / promtool in .tools/.
# A second run installs nothing and takes seconds. Prints what it installs.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BIN=.tools/bin
mkdir -p "$BIN"
say() { echo "setup: $*"; }

# 1. Python venv with the package and its test extras, at exactly the versions locked in
#    ci/constraints.txt (refreshed by ci/lock.sh). Made anew whenever the package metadata
#    or the lock changes (the stamp is a hash of the three files), so nothing unlocked lingers.
PY=${PYTHON:-python3}
stamp=$(cat setup.cfg pyproject.toml ci/constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat .venv/.setup-stamp 2>/dev/null)" != "$stamp" ]; then
  say "creating .venv with $($PY --version) and installing gpuvalues[test] from ci/constraints.txt"
  rm -rf .venv
  "$PY" -m venv .venv
  # PIP_CONSTRAINT also pins the build backend in pip's isolated build environment.
  export PIP_CONSTRAINT="$ROOT/ci/constraints.txt"
  .venv/bin/python -m pip install --quiet --upgrade pip setuptools wheel
  .venv/bin/python -m pip install --quiet -e ".[test]"
  unset PIP_CONSTRAINT
  echo "$stamp" > .venv/.setup-stamp
fi

# matplotlib builds its font cache on first use by running fc-list; build it here, once,
# so the unit tests (which may start no process) find it on a new machine too.
MPLBACKEND=Agg .venv/bin/python -c "import matplotlib.font_manager"

# 2. helm 4.1.4, helm 3.17.2 (as helm3) and kubectl, pinned by sha256.
.venv/bin/python ci/install_tools.py

# 3. prometheus and promtool from Debian's package, unpacked into .tools (never
#    installed as a system service, so nothing starts). Reuse ones already on PATH.
if [ ! -x "$BIN/promtool" ] || [ ! -x "$BIN/prometheus" ]; then
  if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
    say "using prometheus and promtool from PATH"
    ln -sf "$(command -v promtool)" "$BIN/promtool"
    ln -sf "$(command -v prometheus)" "$BIN/prometheus"
  else
    say "installing prometheus and promtool from Debian's prometheus package into .tools"
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
      apt-get update -qq >/dev/null
      (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) \
        || { echo "setup: error: 'apt-get download prometheus' failed; install Debian's prometheus package" >&2; exit 1; }
    fi
    rm -rf .tools/prometheus
    dpkg-deb -x "$tmp"/prometheus_*.deb .tools/prometheus
    ln -sf ../prometheus/usr/bin/promtool "$BIN/promtool"
    ln -sf ../prometheus/usr/bin/prometheus "$BIN/prometheus"
  fi
fi

# --- begin: checkov (issue 3, chart workload policy checks) -------------------------------
# checkov in its own venv (.tools/checkov-venv), apart from .venv: its many pinned
# dependencies must not constrain the package's. Pinned; reinstalled only if the version
# differs. Measured cold install (no pip cache, 2 cores): about 25 s.
CHECKOV_VERSION=3.3.30
if [ "$(.tools/checkov-venv/bin/checkov --version 2>/dev/null)" != "$CHECKOV_VERSION" ]; then
  say "installing checkov $CHECKOV_VERSION into .tools/checkov-venv"
  rm -rf .tools/checkov-venv
  "$PY" -m venv .tools/checkov-venv
  .tools/checkov-venv/bin/python -m pip install --quiet "checkov==$CHECKOV_VERSION"
fi
# --- end: checkov ---------------------------------------------------------------------------

say "ready: $($BIN/helm version --short) (helm), $($BIN/helm3 version --short) (helm3), $($BIN/promtool --version 2>&1 | head -1)"
