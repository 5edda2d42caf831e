#!/usr/bin/env bash
# The test command: sets the machine up (scripts/setup.sh), then lint, types and the whole pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The realengine tier's venv and model, cached outside the repository (rebuilt only when missing or stale).
K25_REALENGINE_DIR=$(bash scripts/realengine.sh | tail -1)
export K25_REALENGINE_DIR
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy --strict daemon tests
set +e
.venv/bin/pytest -ra "$@"
rc=$?
set -e
# pytest's exit 5 (no test collected) is a failure, like any other non-zero exit.
[ "$rc" -eq 0 ] || { echo "pytest exited $rc" >&2; exit "$rc"; }
