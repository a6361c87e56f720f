#!/usr/bin/env bash
# The Sluice end-to-end suite on kind: a real Kubernetes, the real image, LocalStack in the cluster.
#
#   tests/kind/run.sh                 # create cluster, build + load image, deploy, run scenarios.sh, delete cluster
#   KEEP_CLUSTER=1 tests/kind/run.sh  # leave the cluster (and reuse it on the next run)
#
# Needs docker, kind, kubectl and cargo. Not run on the machines this was written on (no container
# engine there); written to run on a machine or hosted CI runner with Docker (.github/workflows/kind.yml).
#
# Environment:
#   KEEP_CLUSTER=1         do not delete the kind cluster on exit
#   CLUSTER_NAME           kind cluster name (default: the name in kind-config.yaml, sluice-e2e)
#   KIND_NODE_IMAGE        kindest/node image to use (default: kind's own default)
#   IMAGE                  image tag to build and load (default: sluice:kind-e2e)
#   SKIP_BUILD=1           do not docker build (the image must exist locally)
#   LOCAL_PORT             host port for the LocalStack port-forward (default: 14566, 127.0.0.1 only)
#   MESSAGES               messages for scenario 1 (default: 5000); ROLL_MESSAGES, CHAOS_MESSAGES and
#                          SEND_RATE pass through to tests/kind/scenarios.sh (see its header)
#
# The setup is kind's; the scenarios are tests/kind/scenarios.sh, which the test command also runs
# on its own control plane (tests/tests/kind_scenarios.rs).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"

CLUSTER_NAME="${CLUSTER_NAME:-sluice-e2e}"
IMAGE="${IMAGE:-sluice:kind-e2e}"
LOCAL_PORT="${LOCAL_PORT:-14566}"
MESSAGES="${MESSAGES:-5000}"
KEEP_CLUSTER="${KEEP_CLUSTER:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
IN_CLUSTER_ENDPOINT=http://localstack.localstack.svc.cluster.local:4566
HOST_ENDPOINT="http://127.0.0.1:${LOCAL_PORT}"
NS=default
SOURCE=kind-e2e
WORK="$here/.work"
CTX="kind-${CLUSTER_NAME}"

failures=0
cluster_up=0
scenarios_ran=0
pf_pid=""
bg_pids=()

log() { printf '[kind-e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
pass() { printf 'PASS: %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*"; failures=$((failures + 1)); }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
k() { kubectl --context "$CTX" "$@"; }

cleanup() {
  local rc=$?
  for pid in "${bg_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [[ -n "$pf_pid" ]]; then
    kill "$pf_pid" 2>/dev/null || true
    if [[ -f "$WORK/port-forward.pid" ]]; then kill "$(cat "$WORK/port-forward.pid")" 2>/dev/null || true; fi
  fi
  # scenarios.sh prints its own diagnostics; these are for a failure in the setup
  if [[ $cluster_up -eq 1 && $scenarios_ran -eq 0 && ( $rc -ne 0 || $failures -ne 0 ) ]]; then
    log "diagnostics (last lines of the operator's log)"
    k -n sluice-system logs deploy/sluice-operator --tail=40 2>/dev/null || true
    k get pods -A 2>/dev/null || true
  fi
  if [[ "$KEEP_CLUSTER" != 1 ]] && command -v kind >/dev/null 2>&1 \
    && kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
    log "deleting kind cluster $CLUSTER_NAME (KEEP_CLUSTER=1 keeps it)"
    kind delete cluster --name "$CLUSTER_NAME" || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
# Prerequisites
missing=()
for tool in docker kind kubectl cargo curl; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  die "missing tools: ${missing[*]} (this suite needs Docker, kind, kubectl and a Rust toolchain)"
fi
docker info >/dev/null 2>&1 || die "docker is installed but no Docker engine answers (docker info failed)"

# ---------------------------------------------------------------------------------------------
# Cluster (reused when it exists: the script is idempotent)
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
  log "reusing kind cluster $CLUSTER_NAME"
else
  log "creating kind cluster $CLUSTER_NAME"
  create=(kind create cluster --name "$CLUSTER_NAME" --config "$here/kind-config.yaml" --wait 120s)
  if [[ -n "${KIND_NODE_IMAGE:-}" ]]; then create+=(--image "$KIND_NODE_IMAGE"); fi
  "${create[@]}"
fi
k cluster-info >/dev/null
cluster_up=1

# ---------------------------------------------------------------------------------------------
# Image
if [[ "$SKIP_BUILD" != 1 ]]; then
  log "building $IMAGE with deploy/Dockerfile"
  DOCKER_BUILDKIT=1 docker build -f deploy/Dockerfile -t "$IMAGE" .
fi
log "loading $IMAGE into kind"
kind load docker-image "$IMAGE" --name "$CLUSTER_NAME"

# Host-side tool, built while nothing else needs the CPU.
log "building sluice-dev"
cargo build --quiet -p sluice-tests --bin sluice-dev
dev="$repo/target/debug/sluice-dev"

# ---------------------------------------------------------------------------------------------
# LocalStack
log "deploying LocalStack (tests/kind/localstack.yaml)"
k apply -f "$here/localstack.yaml"
k -n localstack rollout status deploy/localstack --timeout=300s

# ---------------------------------------------------------------------------------------------
# CRD and operator: the kustomize base with the loaded image (the `images:` entry alone moves
# SLUICE_READER_IMAGE too, which is checked below) and the settings the test command's overlay
# uses too (tests/kind/operator-settings: LocalStack credentials for the operator's own SQS calls).
image_name="${IMAGE%:*}"
image_tag="${IMAGE##*:}"
mkdir -p "$WORK/overlay"
cat >"$WORK/overlay/kustomization.yaml" <<EOF
# Generated by tests/kind/run.sh: the operator base with the image loaded into kind.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../../../deploy/kustomize
components:
  - ../../operator-settings
images:
  - name: ghcr.io/sluice-dev/sluice
    newName: ${image_name}
    newTag: ${image_tag}
EOF
log "installing the CRD and the operator"
k apply -f deploy/crds/
# kubectl wait fails at once (".status.conditions accessor error") while the new CRD has no status
# yet, as the test command's copy showed; try again, bounded.
established=0
for _ in $(seq 1 30); do
  if k wait --for=condition=Established crd/sqssources.sluice.dev --timeout=60s; then established=1; break; fi
  sleep 1
done
[[ $established -eq 1 ]] || die "the SqsSource CRD never became Established"
k apply -k "$WORK/overlay"
k -n sluice-system rollout status deploy/sluice-operator --timeout=300s
actual_image="$(k -n sluice-system get deploy sluice-operator -o jsonpath='{.spec.template.spec.containers[0].image}')"
if [[ "$actual_image" == "$IMAGE" ]]; then
  pass "operator runs $IMAGE"
else
  fail "operator image is $actual_image, want $IMAGE"
fi
reader_image="$(k -n sluice-system get deploy sluice-operator \
  -o jsonpath='{.spec.template.spec.containers[0].env[?(@.name=="SLUICE_READER_IMAGE")].value}')"
if [[ "$reader_image" == "$IMAGE" ]]; then
  pass "the overlay's images: entry moved SLUICE_READER_IMAGE to $IMAGE"
else
  fail "SLUICE_READER_IMAGE is $reader_image, want $IMAGE (the overlay must move the readers' image)"
fi

# ---------------------------------------------------------------------------------------------
# Port-forward LocalStack to 127.0.0.1 for sluice-dev
# A supervising loop reopens the port-forward when it drops (it does under load or when a pod
# behind it goes away); the loop's and kubectl's pids are killed on exit.
mkdir -p "$WORK"
(
  while :; do
    k -n localstack port-forward --address 127.0.0.1 svc/localstack "${LOCAL_PORT}:4566" \
      >>"$WORK/port-forward.log" 2>&1 &
    echo $! >"$WORK/port-forward.pid"
    wait $! || true
    sleep 1
  done
) &
pf_pid=$!
wait_localstack() {
  local _
  for _ in $(seq 1 60); do
    if curl -fsS "${HOST_ENDPOINT}/_localstack/health" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  die "LocalStack not reachable on ${HOST_ENDPOINT} (see $WORK/port-forward.log)"
}
wait_localstack

# The scenarios, shared with the test command's real control plane (tests/tests/kind_scenarios.rs).
log "running tests/kind/scenarios.sh"
scenarios_rc=0
scenarios_ran=1
KUBE_CONTEXT="$CTX" NAMESPACE="$NS" SQS_ENDPOINT="$HOST_ENDPOINT" POD_SQS_ENDPOINT="$IN_CLUSTER_ENDPOINT" \
  OPERATOR_NAMESPACE=sluice-system OPERATOR_DEPLOYMENT=sluice-operator SLUICE_DEV="$dev" \
  MESSAGES="$MESSAGES" SOURCE="$SOURCE" "$here/scenarios.sh" || scenarios_rc=$?

if [[ $failures -ne 0 || $scenarios_rc -ne 0 ]]; then
  log "setup checks failed: $failures; scenarios exit status: $scenarios_rc"
  exit 1
fi
log "all checks passed"
