#!/usr/bin/env bash
# The demo: the whole product on this machine, with no cluster and no Docker. An SqsSource applied to a
# real Kubernetes control plane (kube-apiserver, controller-manager, scheduler and etcd, built from pinned
# Go modules: tests/scripts/kube-binaries.sh, about ten minutes the first time); the operator, running
# with the shipped RBAC and a ServiceAccount token, turns it into a reader Deployment; the process kubelet
# (the one stand-in: pods run as local processes) starts one `sluice-reader` per pod; messages go from an
# SQS queue (LocalStack) to an HTTP sink, and the operator scales the readers with the backlog.
#
#   scripts/demo.sh [--seconds N] [--count N] [--rate R] [--replicas MIN:MAX] [--sink-latency-ms N]
#                   [--example FILE] [--standalone]
#
# It builds the binaries (cargo build --workspace --bins), starts LocalStack (unless one is running),
# creates a fresh queue, starts a CloudEvents sink (`sluice-dev sink-server`), the cluster
# (`sluice-controlplane up`: control plane, process kubelet, the CRD and the reader policy installed),
# installs the operator's ServiceAccount and RBAC from deploy/operator, applies the example SqsSource
# pointed at the queue and the sink (`sluice-dev apply`, server-side apply; no kubectl needed), starts
# `sluice-operator`, sends a burst of numbered messages, and prints one line a second: messages delivered at
# the sink, queue depth, reader processes running, the SqsSource's Ready condition and replicas, and the
# autoscaler's last decision with its reason. The default burst (4000 messages at up to 1000/s, readers
# 0..4) is more than one reader drains in the demo's time, so the operator scales up, drains the queue,
# scales down and then to zero; the demo says at the end whether it saw that. It prints kubectl commands
# that work against the cluster while it runs. After N seconds or Ctrl-C it stops everything
# it started, by PID. --standalone runs one `sluice-reader --source` instead
# (no control plane, no operator). Logs: .sluice/demo/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
readonly LOCALSTACK=tests/scripts/localstack.sh
readonly WORK=.sluice/demo
# The binaries cargo builds: honour CARGO_TARGET_DIR like cargo does.
readonly BIN="${CARGO_TARGET_DIR:-target}/debug"

seconds=45 count=4000 rate=1000 replicas=0:4 example=deploy/examples/minimal-http.yaml standalone=no
sink_latency_ms=300
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --sink-latency-ms) sink_latency_ms="$2"; shift 2 ;;
    --count) count="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --replicas) replicas="$2"; shift 2 ;;
    --example) example="$2"; shift 2 ;;
    --standalone) standalone=yes; shift ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "demo.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
[[ -f "$example" ]] || { echo "demo.sh: example $example not found" >&2; exit 1; }

say() { printf '\n==> %s\n' "$*"; }

say "building the binaries (cargo build --workspace --bins)"
cargo build --quiet --workspace --bins
mkdir -p "$WORK"

started_localstack=no reader_pid="" sink_pid="" sender_pid="" cluster_pid="" operator_pid=""
# Stops a process we started (SIGTERM), waiting up to $2 seconds before SIGKILL.
stop_pid() {
  local pid="$1" grace="$2"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq $((grace * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  trap - EXIT
  trap '' INT TERM # a second Ctrl-C must not leave children behind
  say "stopping what the demo started"
  if [[ -n "$sender_pid" ]]; then kill "$sender_pid" 2>/dev/null || true; wait "$sender_pid" 2>/dev/null || true; fi
  if [[ -n "$operator_pid" ]]; then echo "operator (pid $operator_pid)"; stop_pid "$operator_pid" 15; fi
  if [[ -n "$cluster_pid" ]]; then
    echo "cluster (pid $cluster_pid; its kubelet stops the readers, which drain, then the control plane)"
    stop_pid "$cluster_pid" 60
  fi
  if [[ -n "$reader_pid" ]]; then echo "reader (pid $reader_pid; it drains)"; stop_pid "$reader_pid" 35; fi
  if [[ -n "${queue_url:-}" && -n "${SLUICE_LOCALSTACK_ENDPOINT:-}" ]]; then
    echo "queue after the run: $("$BIN/sluice-dev" counts "$queue_url" 2>/dev/null || echo unknown)"
  fi
  if [[ -n "$sink_pid" ]]; then
    stop_pid "$sink_pid" 5
    if [[ "$standalone" == no ]]; then grep 'sink total' "$WORK/sink.log" || true; fi
  fi
  if [[ "$started_localstack" == yes ]]; then "$LOCALSTACK" stop || true; fi
  echo "logs: $WORK/ (sink.log, cluster.log, operator.log, cluster/kubelet/logs/<namespace>_<pod>.log," \
    "cluster/controlplane/logs/, reader.log) and .sluice/localstack/"
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
# The AWS SDK in the operator (queue figures for scaling) needs credentials and a region; LocalStack
# takes any. The readers get the same from the kubelet (the node's pod environment).
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1

queue_url="$("$BIN/sluice-dev" create-queue "demo-$RANDOM$RANDOM" --visibility 30)"
echo "queue: $queue_url"

# setsid everywhere: Ctrl-C reaches only this script, which then stops the children in order.
rm -f "$WORK/sink.url"
if [[ "$standalone" == yes ]]; then
  say "sink: sluice-dev sink-server (prints the first events, then one line per second)"
  setsid "$BIN/sluice-dev" sink-server --addr 127.0.0.1:0 --show 5 --url-file "$WORK/sink.url" &
else
  # The sink answers each event after ${sink_latency_ms} ms, like a receiver doing real work: one reader
  # (32 requests in flight) then delivers about 100 events/s whatever the machine's speed, so the burst
  # outruns it and the autoscaler has something to do.
  say "sink: sluice-dev sink-server, ${sink_latency_ms} ms per event (log: $WORK/sink.log)"
  setsid "$BIN/sluice-dev" sink-server --addr 127.0.0.1:0 --show 3 --latency-ms "$sink_latency_ms" \
    --url-file "$WORK/sink.url" >"$WORK/sink.log" 2>&1 &
fi
sink_pid=$!
for _ in $(seq 50); do [[ -s "$WORK/sink.url" ]] && break; sleep 0.1; done
sink_url="$(cat "$WORK/sink.url" 2>/dev/null || true)"
[[ -n "$sink_url" ]] || { echo "demo.sh: the sink server did not start" >&2; exit 1; }
echo "sink: $sink_url"

if [[ "$standalone" == yes ]]; then
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
  exit 0
fi

say "Kubernetes control plane binaries (tests/scripts/kube-binaries.sh; built once, then cached)"
SLUICE_KUBE_BINARIES="$(bash tests/scripts/kube-binaries.sh)"
export SLUICE_KUBE_BINARIES
echo "$SLUICE_KUBE_BINARIES"

say "cluster: sluice-controlplane up (log: $WORK/cluster.log)"
rm -rf "$WORK/cluster"
mkdir -p "$WORK/cluster"
setsid "$BIN/sluice-controlplane" up --dir "$PWD/$WORK/cluster" --bin-dir "$(realpath "$BIN")" >"$WORK/cluster.log" 2>&1 &
cluster_pid=$!
for _ in $(seq 600); do [[ -s "$WORK/cluster/cluster.json" ]] && break; kill -0 "$cluster_pid" 2>/dev/null || break; sleep 0.2; done
if ! [[ -s "$WORK/cluster/cluster.json" ]]; then
  echo "demo.sh: the cluster did not start; its log:" >&2
  tail -n 30 "$WORK/cluster.log" >&2
  exit 1
fi
export KUBECONFIG="$PWD/$WORK/cluster/controlplane/admin.kubeconfig"
echo "KUBECONFIG=$KUBECONFIG ($(grep -m1 'server:' "$KUBECONFIG" | tr -s ' '))"

say "apply the SqsSource ($example, replicas $replicas); the CRD is installed with the cluster"
"$BIN/sluice-dev" render-source "$example" --queue-url "$queue_url" --sink-url "$sink_url" \
  --replicas "$replicas" --out "$WORK/source.yaml"
applied="$("$BIN/sluice-dev" apply "$WORK/source.yaml")"
echo "$applied ($WORK/source.yaml)"
source_name="${applied#sqssource/}"
source_name="${source_name%% *}"

say "operator: the shipped ServiceAccount and RBAC (deploy/operator), then sluice-operator with its token (log: $WORK/operator.log)"
"$BIN/sluice-controlplane" operator-kubeconfig --dir "$PWD/$WORK/cluster" --namespace default \
  --out "$PWD/$WORK/operator.kubeconfig"
setsid env RUST_LOG=info KUBECONFIG="$PWD/$WORK/operator.kubeconfig" "$BIN/sluice-operator" \
  --leader-election off --namespace default --admin-addr 127.0.0.1:0 \
  --reader-image sluice:local >"$WORK/operator.log" 2>&1 &
operator_pid=$!

say "while it runs, from another shell (kubectl against the local control plane):"
cat <<EOF
  export KUBECONFIG=$KUBECONFIG
  kubectl get sqss                       # printer columns: guarantee, replicas, backlog, ready...
  kubectl describe sqss $source_name   # conditions and the operator's events (ScaledUp, ScaledDown...)
  kubectl get events                     # the same events, core/v1 view
  kubectl get pods -o wide              # one pod per reader process the kubelet started
  kubectl get nodes                      # the process kubelet's node
  tail -f $WORK/cluster/kubelet/logs/default_<pod>.log   # a reader's log (no kubectl logs here)
  kubectl explain sqssource.spec.scaling
EOF

say "sending $count messages at $rate/s; running for ${seconds}s (Ctrl-C stops earlier)"
"$BIN/sluice-dev" send "$queue_url" --count "$count" --rate "$rate" >"$WORK/send.log" 2>&1 &
sender_pid=$!
start=$SECONDS end=$((SECONDS + seconds))
# What the autoscaler did, from the desired replicas in each progress line.
peak=0 last_desired="${replicas%%:*}" scaled_up=no scaled_down=no
while ((SECONDS < end)); do
  sleep 0.4 # the three look-ups below take about half a second
  for pid in "$cluster_pid" "$operator_pid"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "demo.sh: a process exited early (pid $pid); see $WORK/cluster.log and $WORK/operator.log" >&2
      tail -n 20 "$WORK/operator.log" "$WORK/cluster.log" >&2
      exit 1
    fi
  done
  # No progress line yet is not an error (grep exits 1; pipefail and set -e would end the demo).
  delivered="$(grep -o 'accepted=[0-9]* distinct=[0-9]*' "$WORK/sink.log" | tail -n 1 || true)"
  depth="$("$BIN/sluice-dev" counts "$queue_url" 2>/dev/null || echo 'queue=?')"
  status="$("$BIN/sluice-dev" source-status "$source_name" --pods "$WORK/cluster/kubelet/pods.json" 2>/dev/null \
    || echo 'status=?')"
  printf '%4ss  sink: %-30s  queue: %-34s  %s\n' "$((SECONDS - start))" "${delivered:-accepted=0}" "$depth" "$status"
  if [[ "$status" =~ desired=([0-9]+) ]]; then
    desired="${BASH_REMATCH[1]}"
    if [[ -n "$last_desired" ]] && ((desired > last_desired)); then scaled_up=yes; fi
    if [[ -n "$last_desired" ]] && ((desired < last_desired)); then scaled_down=yes; fi
    if ((desired > peak)); then peak=$desired; fi
    last_desired=$desired
  fi
done
say "autoscaler: scaled up: $scaled_up (peak $peak replicas); scaled down: $scaled_down (now ${last_desired:-?})"
say "first events at the sink"
grep -m3 '^event ' "$WORK/sink.log" || true
grep -h '^sent ' "$WORK/send.log" || true
