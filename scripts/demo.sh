#!/usr/bin/env bash
# The demo: messages go from an SQS queue (LocalStack) through a Sluice reader to an HTTP sink, on this
# machine, with no cluster and no Docker.
#
# Why standalone for now: the reader can run from an SqsSource YAML without Kubernetes, which shows the
# data path (receive, CloudEvents delivery, delete after acknowledgement). When the local control plane
# lands, this script will run the operator flow instead (kubectl apply an SqsSource, watch it scale).
#
#   scripts/demo.sh [--seconds N] [--count N] [--rate R] [--example FILE]
#
# It starts LocalStack (unless one is running), a CloudEvents sink (`sluice-dev sink-server`) and
# `sluice-reader --source <the example, pointed at a fresh queue and the sink>`, sends numbered messages,
# prints what the sink receives, and after N seconds or Ctrl-C stops everything it started, by PID.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
readonly LOCALSTACK=tests/scripts/localstack.sh
readonly WORK=.sluice/demo

seconds=30 count=200 rate=50 example=deploy/examples/minimal-http.yaml
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --count) count="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --example) example="$2"; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
[[ -f "$example" ]] || { echo "demo.sh: example $example not found" >&2; exit 1; }

say() { printf '\n==> %s\n' "$*"; }

say "building sluice-reader and sluice-dev"
cargo build --quiet -p sluice-reader --bin sluice-reader -p sluice-tests --bin sluice-dev
readonly BIN=target/debug
mkdir -p "$WORK"

started_localstack=no reader_pid="" sink_pid="" sender_pid=""
cleanup() {
  trap - EXIT
  trap '' INT TERM # a second Ctrl-C must not leave children behind
  if [[ -n "$sender_pid" ]]; then kill "$sender_pid" 2>/dev/null || true; fi
  if [[ -n "$reader_pid" ]] && kill -0 "$reader_pid" 2>/dev/null; then
    say "stopping the reader (pid $reader_pid; it drains in-flight work)"
    kill -TERM "$reader_pid" 2>/dev/null || true
    wait "$reader_pid" 2>/dev/null || true
  fi
  if [[ -n "${queue_url:-}" && -n "${SLUICE_LOCALSTACK_ENDPOINT:-}" ]]; then
    echo "queue after the run: $("$BIN/sluice-dev" counts "$queue_url" 2>/dev/null || echo unknown)"
  fi
  if [[ -n "$sink_pid" ]]; then
    kill -TERM "$sink_pid" 2>/dev/null || true
    wait "$sink_pid" 2>/dev/null || true
  fi
  if [[ "$started_localstack" == yes ]]; then "$LOCALSTACK" stop || true; fi
  echo "logs: $WORK/reader.log and .sluice/localstack/"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "LocalStack"
if "$LOCALSTACK" status >/dev/null 2>&1; then
  echo "using the LocalStack already running"
else
  started_localstack=yes
  "$LOCALSTACK" start
fi
eval "$("$LOCALSTACK" env)"

queue_url="$("$BIN/sluice-dev" create-queue "demo-$RANDOM$RANDOM" --visibility 30)"
echo "queue: $queue_url"

say "sink: sluice-dev sink-server (prints the first events, then one line per second)"
# setsid: Ctrl-C reaches only this script, which then stops the children in order (reader first).
rm -f "$WORK/sink.url"
setsid "$BIN/sluice-dev" sink-server --addr 127.0.0.1:0 --show 5 --url-file "$WORK/sink.url" &
sink_pid=$!
for _ in $(seq 50); do [[ -s "$WORK/sink.url" ]] && break; sleep 0.1; done
sink_url="$(cat "$WORK/sink.url" 2>/dev/null || true)"
[[ -n "$sink_url" ]] || { echo "demo.sh: the sink server did not start" >&2; exit 1; }

say "reader: sluice-reader --source $WORK/source.yaml (from $example)"
"$BIN/sluice-dev" render-source "$example" --queue-url "$queue_url" --sink-url "$sink_url" --out "$WORK/source.yaml"
rm -f "$WORK/admin.addr"
setsid "$BIN/sluice-reader" --source "$WORK/source.yaml" --admin-addr 127.0.0.1:0 \
  --admin-addr-file "$WORK/admin.addr" >"$WORK/reader.log" 2>&1 &
reader_pid=$!
for _ in $(seq 100); do [[ -s "$WORK/admin.addr" ]] && break; sleep 0.1; done
if ! kill -0 "$reader_pid" 2>/dev/null; then
  echo "demo.sh: sluice-reader exited; its log:" >&2
  tail -n 30 "$WORK/reader.log" >&2
  exit 1
fi
echo "reader admin: http://$(cat "$WORK/admin.addr" 2>/dev/null || echo '?')/metrics"

say "sending $count messages at $rate/s; running for ${seconds}s (Ctrl-C stops earlier)"
"$BIN/sluice-dev" send "$queue_url" --count "$count" --rate "$rate" &
sender_pid=$!
end=$((SECONDS + seconds))
while ((SECONDS < end)); do
  if ! kill -0 "$reader_pid" 2>/dev/null; then
    echo "demo.sh: sluice-reader exited early; its log:" >&2
    tail -n 30 "$WORK/reader.log" >&2
    exit 1
  fi
  sleep 1
done
