#!/usr/bin/env bash
# install.sh: install, upgrade or remove k25-ctl on a GPU host (as root, with systemd as init).
#
#   sudo bash install.sh                         install or upgrade, then start (or restart) k25-ctl
#   sudo bash install.sh --dry-run               print every step; change nothing
#   sudo bash install.sh --uninstall [--purge]   remove the units, the venv and the command; --purge
#                                                also the database, profiles, settings and token
# Options: --prefix DIR (the venv and docs; default /opt/k25-ctl, or where an existing install is),
# --no-start (install; start and restart nothing), --wheels DIR (k25-ctl's packages from this folder of
# wheels, not the package index: `pip wheel -w DIR . pip setuptools wheel` made it). PYTHON=/path/to/python3.x
# picks the interpreter (default: the newest >= 3.11 on PATH).
#
# A second run with nothing new says "nothing to change". Existing profiles, settings and the token are
# never overwritten. A vllm-kimi-k25-int4.service that is not k25-ctl's is kept and adopted (the baseline
# profile gets `adopt = true`). An upgrade backs the database up before it migrates (the path is printed)
# and restarts the daemon; engines run in their own units and keep running.
set -euo pipefail

SRC=$(cd "$(dirname "$0")" && pwd)
PREFIX=/opt/k25-ctl
ETC=/etc/k25-ctl
CACHE=/var/cache/k25-ctl
UNITS=/etc/systemd/system
LINK=/usr/local/bin/k25-ctl
DAEMON=k25-ctl.service
BACKUP_TIMER=k25-ctl-backup.timer  # the daily online backup of the runs database (k25-ctl db backup --scheduled)
BASELINE=vllm-kimi-k25-int4.service
MARK="# Managed by k25-ctl's install.sh"
STAMP=.k25-ctl-install # in the prefix: the fingerprint of the installed source

START=1 DRY=0 UNINSTALL=0 PURGE=0 PREFIX_GIVEN=0 WHEELS=""
changes=0 restart=0 adopted=0 py="" WORK="" SOURCE="" current=0

say() { printf '%s\n' "$*"; }
is_active() { [ "$(systemctl is-active "$1" 2>/dev/null)" = active ]; }
is_enabled() { [ "$(systemctl is-enabled "$1" 2>/dev/null)" = enabled ]; }
die() {
  local IFS=
  printf 'install: %b\n' "$*" >&2
  exit 1
}
usage() { sed -n '2,12p' "$0" | sed -E 's/^# ?//'; }

# Every change goes through act: printed, and done unless --dry-run.
act() {
  local what=$1
  shift
  changes=$((changes + 1))
  if [ "$DRY" = 1 ]; then
    say "would: $what"
  else
    say "  $what"
    "$@"
  fi
}

while [ $# -gt 0 ]; do
  case $1 in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; PREFIX=$2 PREFIX_GIVEN=1; shift 2 ;;
    --prefix=*) PREFIX=${1#*=} PREFIX_GIVEN=1; shift ;;
    --no-start) START=0; shift ;;
    --wheels) [ $# -ge 2 ] || die "--wheels needs a directory"; WHEELS=$2; shift 2 ;;
    --wheels=*) WHEELS=${1#*=}; shift ;;
    --dry-run) DRY=1; shift ;;
    --uninstall) UNINSTALL=1; shift ;;
    --purge) PURGE=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; printf 'install: unknown option %s\n' "$1" >&2; exit 2 ;;
  esac
done
[ "$PURGE" = 0 ] || [ "$UNINSTALL" = 1 ] || die "--purge goes with --uninstall"
if [ -n "$WHEELS" ]; then
  [ -d "$WHEELS" ] || die "--wheels $WHEELS: no such directory. Nothing was changed."
  WHEELS=$(cd "$WHEELS" && pwd)
fi
case $PREFIX in
  /?*) PREFIX=${PREFIX%/} ;;
  *) die "--prefix must be an absolute directory, not '$PREFIX'" ;;
esac
# Without --prefix, an existing install stays where it is (its unit says where).
if [ "$PREFIX_GIVEN" = 0 ] && [ -f "$UNITS/$DAEMON" ] && grep -qF "$MARK" "$UNITS/$DAEMON"; then
  found=$(sed -nE 's|^ExecStart=(/.+)/venv/bin/k25-ctl serve$|\1|p' "$UNITS/$DAEMON")
  PREFIX=${found:-$PREFIX}
fi
K25="$PREFIX/venv/bin/k25-ctl"

cleanup() { if [ -n "$WORK" ]; then rm -rf "$WORK"; fi; }
trap cleanup EXIT

# ---- checks: every one before anything is touched -------------------------------------------------

check_host() {
  [ "$(id -u)" = 0 ] || die "run as root (sudo bash install.sh ...): it writes $UNITS, $ETC and $PREFIX"
  local init
  init=$(cat /proc/1/comm 2>/dev/null || echo unknown)
  if [ ! -d /run/systemd/system ] || [ "$init" != systemd ]; then
    die "systemd is not running as init (PID 1 is '$init'): k25-ctl is a systemd service and owns the\n" \
      "engines' units; install it on a host (or a container) booted with systemd. Nothing was changed."
  fi
}

# A prefix is ours when it holds our stamp, or the venv an older install.sh made; else it must be empty.
prefix_is_ours() { [ -e "$PREFIX/$STAMP" ] || [ -x "$PREFIX/venv/bin/k25-ctl" ]; }

check_prefix() {
  if [ -d "$PREFIX" ] && ! prefix_is_ours && [ -n "$(ls -A "$PREFIX")" ]; then
    die "$PREFIX exists and is not a k25-ctl install: choose another --prefix. Nothing was changed."
  fi
}

find_python() {
  local c found="" cands=(python3.13 python3.12 python3.11 python3)
  [ -z "${PYTHON:-}" ] || cands=("$PYTHON")
  for c in "${cands[@]}"; do
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      py=$(command -v "$c")
      "$py" -c 'import ensurepip, venv' 2>/dev/null ||
        die "$py cannot make a virtualenv: install its venv module (apt-get install python3-venv)."
      return
    fi
    found="$found $c ($("$c" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo '?'))"
  done
  die "Python >= 3.11 is required; found:${found:- none}. Install python3.11 or newer (with its venv\n" \
    "module), or name one with PYTHON=/path/to/python3.x. Nothing was changed."
}

# What decides whether the venv is current: the package's own files.
fingerprint() {
  (cd "$SRC" && find daemon migrations pyproject.toml -type f ! -name '*.pyc' ! -path '*/__pycache__/*' \
    -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}

# The only step that needs the package index, done in a scratch folder before anything else: every
# package k25-ctl needs, and pip, as wheels (the checkout is built from a copy, left untouched). The pip
# that does it lives in a throwaway venv, upgraded first: the interpreter's bundled pip can be years old
# (Python 3.11's is 23.x), and resolves this tree in 16 s of CPU where a current one takes 6 s.
fetch_packages() {
  WORK=$(mktemp -d /tmp/k25-install.XXXXXX)
  mkdir "$WORK/src"
  cp -r "$SRC/daemon" "$SRC/migrations" "$SRC/units" "$SRC/pyproject.toml" "$SRC/README.md" "$WORK/src/"
  local pip=("$WORK/pip/bin/python" -m pip -q --disable-pip-version-check) from=()
  if [ -n "$WHEELS" ]; then
    say "taking k25-ctl's packages from $WHEELS (no package index)"
    from=(--no-index --find-links "$WHEELS")
  else
    say "fetching k25-ctl's packages (pip wheel; the package index must answer)"
  fi
  if ! { "$py" -m venv "$WORK/pip" && "${pip[@]}" install "${from[@]}" --upgrade pip &&
    "${pip[@]}" wheel "${from[@]}" -w "$WORK/wheels" "$WORK/src" pip; } >"$WORK/pip.log" 2>&1; then
    [ -z "$WHEELS" ] || die "cannot build k25-ctl from the wheels in $WHEELS; pip said:\n" \
      "$(tail -n 4 "$WORK/pip.log")\nWhat to do: the folder needs a wheel of every package k25-ctl needs, and\n" \
      "of pip, setuptools and wheel ('pip wheel -w $WHEELS <checkout> pip setuptools wheel' on a host\n" \
      "with the index makes one), then run install.sh again. Nothing was changed."
    die "cannot get k25-ctl's packages from the package index; pip said:\n$(tail -n 4 "$WORK/pip.log")\n" \
      "What to do: check this host's network and proxy (https_proxy) and pip's index settings\n" \
      "('$py -m pip config list', PIP_INDEX_URL), then run install.sh again. Nothing was changed."
  fi
}

# ---- units ------------------------------------------------------------------------------------------

render_unit() { sed -e "s|/usr/local/bin/k25-ctl|$K25|g" -e "s|/opt/k25-ctl/README.md|$PREFIX/README.md|g" "$1"; }
write_unit() { render_unit "$1" >"$2" && chmod 0644 "$2"; }

# Where systemd loads a unit from now ("" if nowhere); templates are looked for in $UNITS only.
unit_file() {
  local f=""
  case $1 in *@.service) ;; *) f=$(systemctl show -P FragmentPath "$1" 2>/dev/null || true) ;; esac
  if [ -z "$f" ] && [ -e "$UNITS/$1" ]; then f="$UNITS/$1"; fi
  printf '%s' "$f"
}

# k25-ctl's own: our mark, or (an older install.sh) an ExecStart that runs k25-ctl. False when none.
unit_is_ours() {
  [ -n "$1" ] && [ -e "$1" ] && { grep -qF "$MARK" "$1" || grep -Eq '^ExecStart=.*/k25-ctl (serve|launch)' "$1"; }
}

check_units() {
  local u name f
  for u in "$SRC"/units/*.service "$SRC"/units/*.timer; do
    name=$(basename "$u")
    f=$(unit_file "$name")
    if [ -z "$f" ] || [ ! -e "$f" ] || unit_is_ours "$f"; then continue; fi  # none, or ours
    if [ "$name" = "$BASELINE" ]; then
      adopted=1
    else
      die "$f exists and is not k25-ctl's: move it away, then run install.sh again. Nothing was changed."
    fi
  done
}

install_units() {
  local u name f dest reload=0
  for u in "$SRC"/units/*.service "$SRC"/units/*.timer; do
    name=$(basename "$u")
    dest="$UNITS/$name"
    f=$(unit_file "$name")
    if [ "$name" = "$BASELINE" ] && [ "$adopted" = 1 ]; then
      say "kept $f: the operator's own unit, adopted by the baseline profile (k25-ctl only starts and stops it)"
      continue
    fi
    if [ -e "$dest" ] && render_unit "$u" | cmp -s - "$dest"; then continue; fi
    act "unit $dest$([ ! -e "$dest" ] || echo ' (upgraded)')" write_unit "$u" "$dest"
    reload=1
    [ "$name" != "$DAEMON" ] || restart=1
  done
  [ "$reload" = 0 ] || act "systemctl daemon-reload" systemctl daemon-reload
}

# ---- files ------------------------------------------------------------------------------------------

# Sets SOURCE (this checkout's fingerprint) and current (1: the venv holds exactly it).
check_venv() {
  SOURCE=$(fingerprint)
  if [ -e "$PREFIX/$STAMP" ] && [ "$(cat "$PREFIX/$STAMP")" = "$SOURCE" ] &&
    "$PREFIX/venv/bin/python" -I -c 'import daemon.cli.main' 2>/dev/null; then
    current=1
  fi
}

install_venv() {
  [ "$current" = 0 ] || return 0
  local what="install k25-ctl into $PREFIX/venv"
  [ ! -x "$K25" ] || what="upgrade $PREFIX/venv (was $("$PREFIX/venv/bin/python" -I -c \
    'import importlib.metadata as m; print(m.version("k25-ctl"))' 2>/dev/null || echo unknown))"
  # Without ensurepip's pip and setuptools (6 s of CPU): the current pip comes with the packages.
  [ -x "$PREFIX/venv/bin/python" ] || act "python venv $PREFIX/venv ($py)" "$py" -m venv --without-pip "$PREFIX/venv"
  act "$what" pip_install
  # An older install.sh copied the sources into the prefix; the venv holds them now.
  local old
  for old in daemon migrations pyproject.toml; do
    [ ! -e "$PREFIX/$old" ] || act "remove the old copy $PREFIX/$old" rm -rf "${PREFIX:?}/$old"
  done
  act "record the installed source in $PREFIX/$STAMP" stamp
  restart=1
}

stamp() { printf '%s\n' "$SOURCE" >"$PREFIX/$STAMP"; }

# The fetched wheels only, by the throwaway pip into the venv's interpreter (pip --python).
pip_install() {
  local wheel pip=("$WORK/pip/bin/python" -m pip --python "$PREFIX/venv/bin/python" install -q
    --disable-pip-version-check --no-index --find-links "$WORK/wheels")
  wheel=$(ls "$WORK"/wheels/k25_ctl-*.whl)
  "${pip[@]}" --upgrade "$wheel" pip
  "${pip[@]}" --no-deps --force-reinstall "$wheel" # the same version number, newer code
}

install_files() {
  mkdir_if() { [ -d "$1" ] || act "directory $1" install -d -m "$2" "$1"; }
  mkdir_if "$PREFIX" 0755
  install_venv
  if ! cmp -s "$SRC/README.md" "$PREFIX/README.md"; then
    act "docs $PREFIX/README.md" install -m 0644 "$SRC/README.md" "$PREFIX/README.md"
  fi
  [ "$(readlink "$LINK" 2>/dev/null)" = "$K25" ] || act "command $LINK -> $K25" ln -sfn "$K25" "$LINK"
  mkdir_if "$ETC/profiles.d" 0755
  local p
  for p in "$SRC"/profiles/*.toml; do
    [ -e "$ETC/profiles.d/$(basename "$p")" ] ||
      act "profile $ETC/profiles.d/$(basename "$p")" install -m 0644 "$p" "$ETC/profiles.d/"
  done
  [ -e "$ETC/k25-ctl.toml" ] || act "settings $ETC/k25-ctl.toml" settings_file
  local t
  for t in token capture-token; do # the admin's; the balancer's mirror's (write-only: capture)
    [ -s "$ETC/$t" ] || act "$t $ETC/$t (mode 0600)" new_token "$ETC/$t"
    if [ -e "$ETC/$t" ] && [ "$(stat -c %a "$ETC/$t")" != 600 ]; then
      act "$t $ETC/$t: mode 0600 (was $(stat -c %a "$ETC/$t"))" chmod 600 "$ETC/$t"
    fi
  done
}

settings_file() { printf '# k25-ctl settings: every key is in daemon/core/settings.py\n' >"$ETC/k25-ctl.toml"; }
new_token() { (umask 077 && "$py" -c 'import secrets; print(secrets.token_urlsafe(32))' >"$1"); }

# A top-level key: before the first [table] of the file, or at its end.
add_adopt() {
  awk -v line="adopt = true  # added by install.sh: $BASELINE is the operator's own unit" \
    '!done && /^[[:space:]]*\[/ { print line; done = 1 } { print } END { if (!done) print line }' \
    "$1" >"$1.new" && chmod --reference="$1" "$1.new" && mv "$1.new" "$1"
}

adopt_baseline() {
  [ "$adopted" = 1 ] || return 0
  local prof="$ETC/profiles.d/baseline.toml"
  if [ -e "$prof" ] && grep -Eq '^[[:space:]]*adopt[[:space:]]*=[[:space:]]*true' "$prof"; then return; fi
  if [ -e "$prof" ] && grep -Eq '^[[:space:]]*adopt[[:space:]]*=' "$prof"; then
    say "warning: $prof sets adopt to false, so k25-ctl would run its own argv in the operator's $BASELINE"
    return
  fi
  act "baseline profile $prof: adopt = true (the host's own $BASELINE)" add_adopt "$prof"
  restart=1
}

# ---- database and daemon ----------------------------------------------------------------------------

migrate() {
  local status
  if [ "$DRY" = 1 ] && [ ! -x "$K25" ]; then
    act "create or migrate the runs database (k25-ctl db upgrade)" true
    return
  fi
  local rc=0
  status=$("$K25" db status 2>&1) || rc=$?
  [ "$rc" != 0 ] || return 0
  # 3: behind (or none yet); anything else is an error to show before the daemon is touched.
  [ "$rc" = 3 ] || die "k25-ctl db status failed (exit $rc):\n$status"
  case $status in
    *"no database yet"*)
      act "create the runs database" "$K25" db upgrade
      return
      ;;
  esac
  if is_active "$DAEMON" && [ "$START" = 0 ]; then
    say "the database needs migrations ($status); the running daemon migrates it when restarted"
    return
  fi
  ! is_active "$DAEMON" || act "stop $DAEMON for the migration (engines keep running)" systemctl stop "$DAEMON"
  act "back up the database before migrating" backup_db
  act "migrate the database ($status)" "$K25" db upgrade
  restart=1
}

backup_db() { say "  database backup: $("$K25" db backup)"; }

start_daemon() {
  if [ "$START" = 0 ]; then
    if [ "$restart" = 1 ] && is_active "$DAEMON"; then
      say "not restarted (--no-start): $DAEMON runs the previous code until: systemctl restart $DAEMON"
    else
      say "not started (--no-start): systemctl enable --now $DAEMON"
    fi
    return
  fi
  is_enabled "$DAEMON" || act "enable $DAEMON" systemctl enable -q "$DAEMON"
  if ! is_active "$DAEMON"; then
    act "start $DAEMON" systemctl start "$DAEMON"
  elif [ "$restart" = 1 ]; then
    act "restart $DAEMON (engines keep running)" systemctl restart "$DAEMON"
  fi
  [ "$DRY" = 1 ] || is_active "$DAEMON" ||
    die "$DAEMON did not stay active: journalctl -u $DAEMON -n 50"
  is_enabled "$BACKUP_TIMER" || act "enable the daily database backup ($BACKUP_TIMER)" systemctl enable -q --now "$BACKUP_TIMER"
}

# ---- uninstall --------------------------------------------------------------------------------------

uninstall() {
  local f u
  if unit_is_ours "$(unit_file "$DAEMON")"; then
    ! is_active "$DAEMON" || act "stop $DAEMON" systemctl stop "$DAEMON"
    ! is_enabled "$DAEMON" || act "disable $DAEMON" systemctl disable -q "$DAEMON"
  fi
  if unit_is_ours "$(unit_file "$BACKUP_TIMER")" && is_enabled "$BACKUP_TIMER"; then
    act "disable $BACKUP_TIMER" systemctl disable -q --now "$BACKUP_TIMER"
  fi
  # Engines started from k25-ctl's units stop with them; the operator's own unit keeps running.
  while read -r u _; do
    act "stop $u" systemctl stop "$u"
  done < <(systemctl list-units --plain --no-legend --state=active 'k25-engine@*')
  f=$(unit_file "$BASELINE")
  if unit_is_ours "$f"; then
    ! is_active "$BASELINE" || act "stop $BASELINE" systemctl stop "$BASELINE"
  elif [ -n "$f" ]; then
    say "kept $f: the operator's own unit"
  fi
  local removed=0
  for u in "$SRC"/units/*.service "$SRC"/units/*.timer; do
    f="$UNITS/$(basename "$u")"
    if unit_is_ours "$f"; then
      act "remove $f" rm -f "$f"
      removed=1
    fi
  done
  [ "$removed" = 0 ] || act "systemctl daemon-reload" systemctl daemon-reload
  case $(readlink "$LINK" 2>/dev/null) in "$PREFIX"/*) act "remove $LINK" rm -f "$LINK" ;; esac
  if [ -d "$PREFIX" ] && prefix_is_ours; then act "remove $PREFIX" rm -rf "${PREFIX:?}"; fi
  local state
  state=$(sed -nE 's/^state_dir[[:space:]]*=[[:space:]]*"(.*)"/\1/p' "$ETC/k25-ctl.toml" 2>/dev/null || true)
  state=${state:-/var/lib/k25-ctl}
  if [ "$PURGE" = 1 ]; then
    for f in "$ETC" "$state" "$CACHE"; do [ ! -e "$f" ] || act "purge $f" rm -rf "$f"; done
  else
    for f in "$ETC" "$state"; do [ ! -e "$f" ] || say "kept $f (--purge removes it)"; done
  fi
}

# ---- main -------------------------------------------------------------------------------------------

check_host
if [ "$UNINSTALL" = 1 ]; then
  uninstall
else
  check_prefix
  find_python
  check_units
  [ "$adopted" = 0 ] || say "found $(unit_file "$BASELINE"): not k25-ctl's; keeping it and adopting it"
  check_venv
  [ "$current" = 1 ] || [ "$DRY" = 1 ] || fetch_packages
  install_files
  adopt_baseline
  install_units
  migrate
  start_daemon
fi
if [ "$changes" = 0 ]; then
  say "nothing to change"
elif [ "$DRY" = 1 ]; then
  say "dry run: $changes step(s) would run; nothing was changed"
else
  say "done: $changes step(s)"
  if [ "$UNINSTALL" = 0 ] && [ "$START" = 1 ]; then
    say "$DAEMON: $(systemctl show -P StatusText "$DAEMON")"
    say "web page and API on the address in $ETC/k25-ctl.toml (default http://127.0.0.1:8025); token in $ETC/token"
  fi
fi
