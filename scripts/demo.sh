#!/usr/bin/env bash
# The demo: sets the machine up, boots a sandbox (a real systemd in namespaces, fake engines, simulated
# GPUs) with the daemon on 127.0.0.1:${K25_DEMO_PORT:-8025} and the baseline engine running.
set -euo pipefail
cd "$(dirname "$0")/.."
K25_WITH_BROWSER=0 bash scripts/setup.sh
# The stock profiles read real weight files (256 MiB, made once): residency, warming and the load show them.
# The baseline parks: an experiment's way back to it is a wake, proven by its known answer.
.venv/bin/k25-ctl sandbox up --port "${K25_DEMO_PORT:-8025}" --load-seconds 5 --weights /var/cache/k25-demo-weights \
  --park baseline --activate baseline
