#!/usr/bin/env bash
# Installs k25-ctl on a GPU host (as root): a virtualenv in /opt/k25-ctl, the `k25-ctl` command, the units,
# /etc/k25-ctl (stock profiles, settings, a fresh token of mode 0600), /var/lib/k25-ctl with its database,
# then starts k25-ctl.service. Idempotent: existing profiles, settings and token are kept.
#   ROOT=/some/dir bash install.sh --no-start   installs into a staging root (what the tests do)
set -euo pipefail
cd "$(dirname "$0")"
ROOT=${ROOT:-}
START=1
[ "${1:-}" = "--no-start" ] && START=0
opt=$ROOT/opt/k25-ctl etc=$ROOT/etc/k25-ctl state=$ROOT/var/lib/k25-ctl units=$ROOT/etc/systemd/system

py=""
for c in python3.12 python3.11 python3; do
  if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then py=$c; break; fi
done
[ -n "$py" ] || { echo "install: Python >= 3.11 is required" >&2; exit 1; }

mkdir -p "$opt" "$etc/profiles.d" "$state" "$units" "$ROOT/usr/local/bin"
cp -r daemon migrations pyproject.toml README.md "$opt/"
[ -x "$opt/venv/bin/python" ] || "$py" -m venv "$opt/venv"
"$opt/venv/bin/python" -m pip install -q --disable-pip-version-check "$opt"
ln -sf "$opt/venv/bin/k25-ctl" "$ROOT/usr/local/bin/k25-ctl"

for p in profiles/*.toml; do [ -e "$etc/profiles.d/$(basename "$p")" ] || cp "$p" "$etc/profiles.d/"; done
[ -e "$etc/k25-ctl.toml" ] || printf '# k25-ctl settings: see daemon/settings.py for every key\n' > "$etc/k25-ctl.toml"
if [ ! -s "$etc/token" ]; then
  (umask 077; "$py" -c 'import secrets; print(secrets.token_urlsafe(32))' > "$etc/token")
fi
chmod 600 "$etc/token"
cp units/*.service "$units/"

K25_CONFIG="$etc/k25-ctl.toml" K25_CONFIG_DIR="$etc" K25_STATE_DIR="$state" "$opt/venv/bin/k25-ctl" db upgrade
if [ "$START" = 1 ] && [ -z "$ROOT" ]; then
  systemctl daemon-reload
  systemctl enable --now k25-ctl.service
  echo "k25-ctl is running: http://127.0.0.1:8025 (token in /etc/k25-ctl/token)"
fi
