#!/usr/bin/env bash
# The whole test suite: set up (idempotent), build the e2e control plane and the upstream
# oracle (each cached by version), then run every test group. Extra arguments go to pytest, e.g. `-m unit`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash ci/setup.sh
if [ -x ci/e2e/build.sh ]; then
  bash ci/e2e/build.sh
fi
if [ -x ci/oracle/build.sh ]; then
  bash ci/oracle/build.sh
fi
# lint and types first: seconds, and a finding there fails the run as a test would
.venv/bin/ruff check gpuvalues tests bench ci
.venv/bin/python ci/typecheck.py
set +e
# one worker per core, each test file whole on one worker (module-scoped clusters stay
# shared); TEST_WORKERS=0 runs in this process. Arguments after it override (-n 0).
.venv/bin/python -m pytest -n "${TEST_WORKERS:-auto}" --dist loadfile "$@"
rc=$?
set -e
# pytest exits 5 when it collected no test: that is a failure, not a pass.
if [ "$rc" -eq 5 ]; then echo "test: no tests were collected" >&2; exit 1; fi
exit "$rc"
