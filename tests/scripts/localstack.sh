#!/usr/bin/env bash
# LocalStack (SQS + S3) on loopback, installed from PyPI into a project-local venv: no Docker.
#
# Why a script of our own: the tests need an SQS that starts in seconds on a fresh machine with no
# container engine. LocalStack's host mode does that, but only with Python 3.13, pinned dependencies
# (later releases break it) and a dozen settings; this script is the one place that knows them.
#
#   tests/scripts/localstack.sh install   create .sluice/localstack/venv (again only when the pins change)
#   tests/scripts/localstack.sh start     install if needed, start on 127.0.0.1:$SLUICE_LOCALSTACK_PORT, wait
#   tests/scripts/localstack.sh stop      stop the instance this script started (by the PID in its pid file)
#   tests/scripts/localstack.sh status    print whether it is installed, running and healthy
#   tests/scripts/localstack.sh env       print `export` lines for the tests: eval "$(... env)"
#
# Environment: SLUICE_LOCALSTACK_PORT (default 4566), SLUICE_PYTHON (a Python 3.13 to use).
set -euo pipefail

readonly LOCALSTACK_PIN='localstack-core[base-runtime]==2026.3.0'
readonly HEALTH_TIMEOUT_SECONDS=90
readonly STOP_GRACE_SECONDS=10

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
readonly CONSTRAINTS="$REPO_ROOT/tests/localstack/constraints.txt"
readonly HOME_DIR="$REPO_ROOT/.sluice/localstack"
readonly VENV="$HOME_DIR/venv"
readonly STAMP="$HOME_DIR/venv.stamp"
readonly LOCK="$HOME_DIR/lock"

PORT="${SLUICE_LOCALSTACK_PORT:-4566}"
[[ "$PORT" =~ ^[0-9]+$ ]] || { echo "localstack: SLUICE_LOCALSTACK_PORT must be a port number, got '$PORT'" >&2; exit 2; }
# The default port keeps the plain names; another port gets its own files so two instances can coexist.
if [[ "$PORT" == 4566 ]]; then SUFFIX=""; else SUFFIX="-$PORT"; fi
readonly PID_FILE="$HOME_DIR/localstack$SUFFIX.pid"
readonly LOG_FILE="$HOME_DIR/localstack$SUFFIX.log"
readonly STATE_DIR="$HOME_DIR/state$SUFFIX"
readonly ENDPOINT="http://127.0.0.1:$PORT"

log() { echo "localstack: $*" >&2; }

# Serialise install and start: parallel test processes may all try to start LocalStack at once.
take_lock() {
  mkdir -p "$HOME_DIR"
  exec 9>"$LOCK"
  flock 9
}

is_python_313() {
  "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 13) else 1)' >/dev/null 2>&1
}

find_python() {
  local candidate root
  for candidate in "${SLUICE_PYTHON:-}" python3.13 python3 python; do
    [[ -n "$candidate" ]] || continue
    if command -v "$candidate" >/dev/null 2>&1 && is_python_313 "$candidate"; then
      command -v "$candidate"
      return 0
    fi
  done
  for candidate in "$HOME"/.pyenv/versions/3.13*/bin/python3; do
    if [[ -x "$candidate" ]] && is_python_313 "$candidate"; then echo "$candidate"; return 0; fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    root="$(pyenv root)"
    for candidate in "$root"/versions/3.13*/bin/python3; do
      if [[ -x "$candidate" ]] && is_python_313 "$candidate"; then echo "$candidate"; return 0; fi
    done
  fi
  cat >&2 <<'MSG'
localstack: no Python 3.13 found (LocalStack 2026.3.0 in host mode needs exactly 3.13;
3.11 and 3.12 fail with "No component plugins found"). Looked at $SLUICE_PYTHON, python3.13, python3,
python on PATH, ~/.pyenv/versions/3.13*/bin/python3 and `pyenv root`. Get one with either:
  pyenv install 3.13          # https://github.com/pyenv/pyenv#installation
  sudo apt-get install python3.13 python3.13-venv   # where your distribution packages it
or point SLUICE_PYTHON at a python3.13 binary, then run this command again.
MSG
  return 1
}

# What an install depends on: the pin, every constraint, and the interpreter version.
pins_hash() {
  { echo "$LOCALSTACK_PIN"; cat "$CONSTRAINTS"; "$1" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1
}

do_install() {
  local python hash
  python="$(find_python)"
  hash="$(pins_hash "$python")"
  if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$hash" ]]; then
    return 0
  fi
  log "installing $LOCALSTACK_PIN with $python into $VENV"
  rm -rf "$VENV" "$STAMP"
  "$python" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    -c "$CONSTRAINTS" "$LOCALSTACK_PIN"
  # Written last, so an interrupted install is redone next time.
  echo "$hash" >"$STAMP"
  log "installed"
}

health_json() {
  curl --silent --fail --max-time 2 "$ENDPOINT/_localstack/health" 2>/dev/null
}

# Healthy means both services the project uses answer: `available` (lazy) or `running`.
is_healthy() {
  local body
  body="$(health_json)" || return 1
  grep -Eq '"sqs": ?"(available|running)"' <<<"$body" && grep -Eq '"s3": ?"(available|running)"' <<<"$body"
}

# The PID in our pid file, only if that process is still a LocalStack we started.
our_pid() {
  local pid
  [[ -f "$PID_FILE" ]] || return 1
  pid="$(cat "$PID_FILE")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  grep -qa 'localstack.runtime.main' "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

do_start() {
  take_lock
  if is_healthy; then
    log "already healthy at $ENDPOINT"
    return 0
  fi
  do_install
  local pid
  if pid="$(our_pid)"; then
    log "process $pid from an earlier start is still starting; waiting for it"
  else
    mkdir -p "$STATE_DIR/fs" "$STATE_DIR/config" "$STATE_DIR/cache"
    log "starting on $ENDPOINT (log: $LOG_FILE)"
    echo "--- start $(date -u +%FT%TZ) port $PORT" >>"$LOG_FILE"
    # setsid: a Ctrl-C aimed at whoever called us does not reach the server; 9>&- : it must not hold the lock.
    env OVERRIDE_IN_DOCKER=0 \
      FILESYSTEM_ROOT="$STATE_DIR/fs" CONFIG_DIR="$STATE_DIR/config" XDG_CACHE_HOME="$STATE_DIR/cache" \
      GATEWAY_LISTEN="127.0.0.1:$PORT" LOCALSTACK_HOST="127.0.0.1:$PORT" GATEWAY_SERVER=hypercorn \
      SERVICES=sqs,s3 EAGER_SERVICE_LOADING=1 SQS_ENDPOINT_STRATEGY=path \
      SQS_DISABLE_CLOUDWATCH_METRICS=1 DNS_ADDRESS=0 DISABLE_EVENTS=1 SKIP_SSL_CERT_DOWNLOAD=1 \
      setsid "$VENV/bin/python" -m localstack.runtime.main </dev/null >>"$LOG_FILE" 2>&1 9>&- &
    pid=$!
    echo "$pid" >"$PID_FILE"
  fi
  local deadline=$((SECONDS + HEALTH_TIMEOUT_SECONDS))
  until is_healthy; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "process $pid exited before becoming healthy; last log lines:"
      tail -n 40 "$LOG_FILE" >&2
      rm -f "$PID_FILE"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      log "not healthy after ${HEALTH_TIMEOUT_SECONDS}s; last log lines:"
      tail -n 40 "$LOG_FILE" >&2
      return 1
    fi
    sleep 0.2
  done
  log "healthy at $ENDPOINT (pid $pid)"
}

do_stop() {
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PID_FILE"
    log "not running (no live process in $PID_FILE)"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_GRACE_SECONDS))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    log "pid $pid still running ${STOP_GRACE_SECONDS}s after TERM; sending KILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PID_FILE"
  log "stopped pid $pid"
}

do_status() {
  local installed=no running=no healthy=no pid=""
  [[ -x "$VENV/bin/python" && -f "$STAMP" ]] && installed=yes
  pid="$(our_pid)" && running="yes (pid $pid)"
  is_healthy && healthy=yes
  echo "installed: $installed ($VENV)"
  echo "started by this script: $running"
  echo "healthy at $ENDPOINT: $healthy"
  [[ "$healthy" == yes ]]
}

do_env() {
  cat <<ENV
export SLUICE_LOCALSTACK_ENDPOINT=$ENDPOINT
export AWS_ACCESS_KEY_ID=test
export AWS_SECRET_ACCESS_KEY=test
export AWS_REGION=us-east-1
ENV
}

case "${1:-}" in
  install) take_lock; do_install ;;
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  env) do_env ;;
  *)
    echo "usage: $0 install|start|stop|status|env" >&2
    exit 2
    ;;
esac
