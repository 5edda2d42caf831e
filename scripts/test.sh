#!/usr/bin/env bash
# The test command: sets the machine up (scripts/setup.sh), then lint, types, the manual (mkdocs --strict)
# and the whole pytest suite.
# pytest runs on K25_TEST_WORKERS workers (default 6; 0: one process) with --dist loadfile: each module
# runs whole on one worker, so the tests that share a sandbox stay together; the modules are handed out in
# tests/conftest.py's order, the longest first (--no-loadscope-reorder). Lint and types run beside the
# first tests. Arguments go to pytest: `bash scripts/test.sh tests/unit`.
# Why 6 on 2 cores: the sandbox tests mostly wait (engines paced in wall time, systemd, loads), 1.4 of 2
# cores were busy with 4 workers; 5 took a fresh-clone run from 635 s of pytest to 585 s, and 6 (same
# code, one run each) from 745 s to 690 s of the whole CI (the sandbox units run at Nice=-10, so the
# engines and the benchmark client keep their pace).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The realengine tier's venv and model, cached outside the repository (rebuilt only when missing or stale).
K25_REALENGINE_DIR=$(bash scripts/realengine.sh | tail -1)
export K25_REALENGINE_DIR
# mypy's cache, outside the repository too: a fresh clone's files have new mtimes, but mypy then compares
# their hashes, so only what changed is checked again (22 s of CPU cold, under 1 s warm).
MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-/var/cache/k25-ctl/mypy}"
mkdir -p "$MYPY_CACHE_DIR" 2>/dev/null || MYPY_CACHE_DIR=.mypy_cache
export MYPY_CACHE_DIR
checks=$(mktemp)
trap 'rm -f "$checks"' EXIT
(
  .venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy --strict daemon sandbox/k25_sandbox tests perf &&
    NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet
) >"$checks" 2>&1 &
lint=$!
set +e
.venv/bin/pytest -ra --durations=30 -n "${K25_TEST_WORKERS:-6}" --dist loadfile --no-loadscope-reorder "$@"
rc=$?
wait "$lint"
lint_rc=$?
set -e
cat "$checks"
[ "$lint_rc" -eq 0 ] || { echo "ruff, mypy or mkdocs failed ($lint_rc)" >&2; exit "$lint_rc"; }
# pytest's exit 5 (no test collected) is a failure, like any other non-zero exit.
[ "$rc" -eq 0 ] || { echo "pytest exited $rc" >&2; exit "$rc"; }
