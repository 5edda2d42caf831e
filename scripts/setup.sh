#!/usr/bin/env bash
# Installs what k25-ctl's tests and demo need on a fresh machine (Debian, as root): system packages if
# missing, and a virtual environment in .venv with the package and its dev extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v dbus-daemon >/dev/null || need+=(dbus)
command -v fuser >/dev/null || need+=(psmisc)
command -v unshare >/dev/null || need+=(util-linux)
command -v curl >/dev/null || need+=(curl)
command -v shellcheck >/dev/null || need+=(shellcheck)
command -v setpriv >/dev/null || need+=(util-linux)
if [ "${K25_WITH_BROWSER:-1}" = 1 ] && ! command -v chromium >/dev/null; then need+=(chromium); fi
# A real load balancer for the drain test, and nginx to validate the README's snippet (never started).
command -v haproxy >/dev/null || need+=(haproxy)
command -v nginx >/dev/null || need+=(nginx)
# Prometheus for the dashboard's test (a real one scrapes a sandbox) and promtool for the alert rules' tests.
command -v promtool >/dev/null || need+=(prometheus)
# An ssh client: the fleet test's unreachable host is one Ansible cannot reach over ssh.
command -v ssh >/dev/null || need+=(openssh-client)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  # Installing must not start services (haproxy, nginx, prometheus) here: a policy-rc.d says no, unless
  # one is there already (then it decides).
  guard=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && guard=1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  [ -z "$guard" ] || rm -f /usr/sbin/policy-rc.d
fi

py=""
for c in python3.12 python3.11 python3; do
  if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then py=$c; break; fi
done
[ -n "$py" ] || { echo "setup: Python >= 3.11 is required" >&2; exit 1; }
# uv, kept outside the repository like the realengine tier's cache (made once, by the interpreter's pip).
uv_home=${K25_UV_DIR:-/var/cache/k25-ctl/uv}
mkdir -p "$(dirname "$uv_home")" 2>/dev/null || uv_home=${XDG_CACHE_HOME:-$HOME/.cache}/k25-ctl/uv
if ! "$uv_home/bin/uv" --version >/dev/null 2>&1; then
  rm -rf "$uv_home"
  "$py" -m venv "$uv_home"
  "$uv_home/bin/python" -m pip install -q --disable-pip-version-check uv
fi
uv=$uv_home/bin/uv
# uv makes the venv, pip in it (a test builds a wheel with it): 0.4 s, where `python -m venv` takes 6 s of
# CPU (ensurepip installs and compiles pip and setuptools).
[ -x .venv/bin/python ] || "$uv" venv -q --seed --python "$py" .venv
# uv installs the packages (from PyPI, like pip; its cache makes a fresh set-up 15 s instead of pip's 58,
# all of it CPU: pip's resolver and its one-process byte-compiling). Byte-compiled at install, on every
# core: with PYTHONDONTWRITEBYTECODE=1 (this machine's environment) Python never writes the .pyc it
# compiles, and every daemon, engine and CLI process would compile what it imports again (CI 699 -> 778 s).
# The sandbox (fake engines, simulated GPUs: the tests' and the demo's) is its own distribution, sandbox/:
# the daemon's wheel, what install.sh puts on a host, carries none of it.
"$uv" pip install -q --python .venv/bin/python --compile-bytecode -e '.[dev]' -e ./sandbox
