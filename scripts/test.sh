#!/usr/bin/env bash
# The test command: sets the machine up (scripts/setup.sh), then lint, types and the whole pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy --strict daemon tests
set +e
.venv/bin/pytest -ra "$@"
rc=$?
set -e
# pytest's exit 5 (no test collected) is a failure, like any other non-zero exit.
[ "$rc" -eq 0 ] || { echo "pytest exited $rc" >&2; exit "$rc"; }
