#!/usr/bin/env bash
# The Sluice end-to-end suite on kind: a real Kubernetes, the real image, LocalStack in the cluster.
#
#   tests/kind/run.sh                 # create cluster, build + load image, deploy, run scenarios, delete cluster
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
#   MESSAGES               messages for scenario 1 (default: 5000)
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
REGION=us-east-1
ACCOUNT=000000000000
IN_CLUSTER_ENDPOINT=http://localstack.localstack.svc.cluster.local:4566
HOST_ENDPOINT="http://127.0.0.1:${LOCAL_PORT}"
NS=default
SOURCE=kind-e2e
WORK="$here/.work"
CTX="kind-${CLUSTER_NAME}"

failures=0
cluster_up=0
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
  if [[ $cluster_up -eq 1 && ( $rc -ne 0 || $failures -ne 0 ) ]]; then
    log "diagnostics (last lines of the operator's and readers' logs)"
    k -n sluice-system logs deploy/sluice-operator --tail=40 2>/dev/null || true
    k -n "$NS" logs "deploy/${SOURCE}-reader" --tail=40 2>/dev/null || true
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
sdev() { "$dev" --endpoint "$HOST_ENDPOINT" "$@"; }

# ---------------------------------------------------------------------------------------------
# LocalStack
log "deploying LocalStack (tests/kind/localstack.yaml)"
k apply -f "$here/localstack.yaml"
k -n localstack rollout status deploy/localstack --timeout=300s

# ---------------------------------------------------------------------------------------------
# CRD and operator: the kustomize base with the loaded image (the `images:` entry alone moves
# SLUICE_READER_IMAGE too, which is checked below) and LocalStack credentials for the
# operator's own SQS calls (GetQueueUrl / GetQueueAttributes).
image_name="${IMAGE%:*}"
image_tag="${IMAGE##*:}"
mkdir -p "$WORK/overlay"
cat >"$WORK/overlay/kustomization.yaml" <<EOF
# Generated by tests/kind/run.sh: the operator base with the image loaded into kind.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../../../deploy/kustomize
images:
  - name: ghcr.io/sluice-dev/sluice
    newName: ${image_name}
    newTag: ${image_tag}
configMapGenerator:
  - name: sluice-operator-settings
    namespace: sluice-system
    behavior: merge
    literals:
      - RUST_LOG=info,kube=warn,aws_config=warn
      - AWS_ACCESS_KEY_ID=test
      - AWS_SECRET_ACCESS_KEY=test
      - AWS_REGION=${REGION}
EOF
log "installing the CRD and the operator"
k apply -f deploy/crds/
k wait --for=condition=Established crd --all --timeout=60s
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
if k -n sluice-system get pdb sluice-operator >/dev/null 2>&1 && k -n sluice-system get svc sluice-operator >/dev/null 2>&1; then
  pass "operator PodDisruptionBudget and Service installed"
else
  fail "operator PodDisruptionBudget or Service missing"
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

# ---------------------------------------------------------------------------------------------
# Queues: names unique per run so a reused cluster starts from empty queues.
run_id="$(date +%s)"
src_q="kind-src-${run_id}"
out_q="kind-out-${run_id}"
src_url="$(sdev create-queue "$src_q" --visibility 5)"
out_url="$(sdev create-queue "$out_q")"
log "source queue $src_url"
log "output queue $out_url"
out_url_in_cluster="${IN_CLUSTER_ENDPOINT}/queue/${REGION}/${ACCOUNT}/${out_q}"

# field value of `sluice-dev counts`: visible / in_flight / delayed
count_of() { # queue_url field
  local line
  if ! line="$(sdev counts "$1" 2>/dev/null)"; then
    # a dropped port-forward is the usual cause: the supervisor reopens it; retry once
    sleep 3
    line="$(sdev counts "$1")" || { echo -1; return; }
  fi
  sed -n "s/.*\b$2=\([0-9]*\).*/\1/p" <<<"$line"
}

# Waits until the output queue holds at least $1 messages and the source queue is empty, then
# judges: fewer than $1 is loss (FAIL); more is at-least-once duplicates (reported, as the Rust
# e2e suite allows them). Counting is by LocalStack's ApproximateNumberOfMessages (exact on
# LocalStack) through `sluice-dev counts`: it cannot tell distinct bodies from duplicates, since
# sluice-dev has no drain/receive subcommand (see tests/kind/README.md).
expect_delivered() { # expected label timeout_s
  local want=$1 label=$2 timeout=${3:-300} deadline out vis inflight
  deadline=$((SECONDS + timeout))
  while :; do
    out="$(count_of "$out_url" visible)"
    vis="$(count_of "$src_url" visible)"
    inflight="$(count_of "$src_url" in_flight)"
    if [[ "$out" -ge "$want" && "$vis" -eq 0 && "$inflight" -eq 0 ]]; then break; fi
    if [[ $SECONDS -ge $deadline ]]; then break; fi
    sleep 3
  done
  # let stragglers (duplicates) land before judging
  sleep 5
  out="$(count_of "$out_url" visible)"
  vis="$(count_of "$src_url" visible)"
  inflight="$(count_of "$src_url" in_flight)"
  log "$label: output=$out (want $want), source visible=$vis in_flight=$inflight"
  if [[ "$out" -lt "$want" ]]; then
    fail "$label: output queue has $out of $want messages (loss)"
  else
    pass "$label: output queue received $out for $want sent (duplicates: $((out - want)))"
  fi
  if [[ "$vis" -eq 0 && "$inflight" -eq 0 ]]; then
    pass "$label: source queue empty"
  else
    fail "$label: source queue not empty (visible=$vis in_flight=$inflight)"
  fi
}

reader_selector() {
  # shellcheck disable=SC2016 # a Go template, not shell
  k -n "$NS" get deploy "${SOURCE}-reader" \
    -o go-template='{{range $k, $v := .spec.selector.matchLabels}}{{$k}}={{$v}},{{end}}' | sed 's/,$//'
}

wait_readers_ready() { # label
  local deadline=$((SECONDS + 300))
  until k -n "$NS" get deploy "${SOURCE}-reader" >/dev/null 2>&1; do
    [[ $SECONDS -ge $deadline ]] && { fail "$1: Deployment ${SOURCE}-reader never appeared"; return 1; }
    sleep 2
  done
  if k -n "$NS" rollout status "deploy/${SOURCE}-reader" --timeout=300s; then
    local ready
    ready="$(k -n "$NS" get deploy "${SOURCE}-reader" -o jsonpath='{.status.readyReplicas}')"
    if [[ "${ready:-0}" -ge 1 ]]; then pass "$1: readers Ready ($ready)"; return 0; fi
  fi
  fail "$1: readers not Ready"
  return 1
}

render_source() { # pollers
  cat <<EOF
apiVersion: sluice.dev/v1alpha1
kind: SqsSource
metadata:
  name: ${SOURCE}
  namespace: ${NS}
spec:
  queues:
    - name: ${src_q}
      region: ${REGION}
      endpoint: ${IN_CLUSTER_ENDPOINT}
  credentials:
    source: Secret
    secretRef:
      name: localstack-credentials
  receive:
    pollers: $1
    waitTimeSeconds: 1
    visibilityTimeoutSeconds: 5
  sinks:
    - name: out
      sqs:
        queueUrl: ${out_url_in_cluster}
        region: ${REGION}
        endpoint: ${IN_CLUSTER_ENDPOINT}
  scaling:
    minReplicas: 2
    maxReplicas: 2
    pollIntervalSeconds: 1
  reader:
    logLevel: info
    resources:
      requests:
        cpu: 50m
        memory: 48Mi
    podLabels:
      team: e2e
EOF
}

# The reader pods as spec.reader shaped them, with no privileges they do not use.
check_reader_pods() { # label
  local pod
  pod="$(k -n "$NS" get pods -l "$(reader_selector)" -o name | head -n1)"
  [[ -n "$pod" ]] || { fail "$1: no reader pod"; return; }
  local jp='{.spec.automountServiceAccountToken} {.spec.containers[0].resources.requests.memory} {.metadata.labels.team} {.spec.containers[0].securityContext.readOnlyRootFilesystem} {.spec.containers[0].securityContext.allowPrivilegeEscalation} {.spec.securityContext.runAsNonRoot} {.spec.containers[0].securityContext.capabilities.drop[0]}'
  local got
  got="$(k -n "$NS" get "$pod" -o jsonpath="$jp")"
  if [[ "$got" == "true 48Mi e2e true false true ALL" ]]; then
    pass "$1: reader pod shaped from spec.reader, API token for its sink health report, no privileges"
  else
    fail "$1: reader pod fields are '$got', want 'true 48Mi e2e true false true ALL'"
  fi
  if k -n "$NS" get "$pod" -o jsonpath='{.spec.containers[0].env[*].name}' | grep -qw AWS_ROLE_ARN; then
    fail "$1: the reader sets AWS_ROLE_ARN, which belongs to the EKS pod identity webhook"
  else
    pass "$1: no AWS_ROLE_ARN on the reader"
  fi
  if [[ "$(k -n "$NS" get pdb "${SOURCE}-reader" -o jsonpath='{.spec.maxUnavailable}' 2>/dev/null)" == "1" ]]; then
    pass "$1: readers' PodDisruptionBudget (maxUnavailable 1)"
  else
    fail "$1: no PodDisruptionBudget ${SOURCE}-reader with maxUnavailable 1"
  fi
  if k -n "$NS" get sluice -o name 2>/dev/null | grep -q "sqssource.*/${SOURCE}$"; then
    pass "$1: kubectl get sluice lists the source"
  else
    fail "$1: kubectl get sluice does not list ${SOURCE}"
  fi
}

# A fresh start when the cluster is reused.
k -n "$NS" delete sqssource "$SOURCE" --ignore-not-found --wait=true
k -n "$NS" create secret generic localstack-credentials \
  --from-literal=AWS_ACCESS_KEY_ID=test --from-literal=AWS_SECRET_ACCESS_KEY=test \
  --dry-run=client -o yaml | k apply -f -

# ---------------------------------------------------------------------------------------------
log "scenario 1: apply -> readers Ready -> ${MESSAGES} delivered"
render_source 2 | k apply -f -
wait_readers_ready "scenario 1" || true
check_reader_pods "scenario 1"
sdev send "$src_url" --count "$MESSAGES"
total=$MESSAGES
expect_delivered "$total" "scenario 1" 600

# ---------------------------------------------------------------------------------------------
log "scenario 2: spec change (receive.pollers 2 -> 3) rolls the readers without loss"
old_hash="$(k -n "$NS" get deploy "${SOURCE}-reader" \
  -o jsonpath='{.spec.template.metadata.annotations.sluice\.dev/config-hash}')"
sdev send "$src_url" --count 2000 --rate 100 &
send_pid=$!
bg_pids+=("$send_pid")
sleep 5
k -n "$NS" patch sqssource "$SOURCE" --type merge -p '{"spec":{"receive":{"pollers":3}}}'
deadline=$((SECONDS + 120))
new_hash="$old_hash"
while [[ "$new_hash" == "$old_hash" && $SECONDS -lt $deadline ]]; do
  sleep 2
  new_hash="$(k -n "$NS" get deploy "${SOURCE}-reader" \
    -o jsonpath='{.spec.template.metadata.annotations.sluice\.dev/config-hash}')"
done
if [[ -n "$new_hash" && "$new_hash" != "$old_hash" ]]; then
  pass "scenario 2: config-hash changed ($old_hash -> $new_hash)"
else
  fail "scenario 2: config-hash did not change after the spec change"
fi
if k -n "$NS" rollout status "deploy/${SOURCE}-reader" --timeout=300s; then
  pass "scenario 2: rollout completed"
else
  fail "scenario 2: rollout did not complete"
fi
wait "$send_pid" || fail "scenario 2: sending failed"
total=$((total + 2000))
expect_delivered "$total" "scenario 2" 600

# ---------------------------------------------------------------------------------------------
log "scenario 3: reader pods force-deleted repeatedly and the operator restarted, without loss"
sdev send "$src_url" --count 3000 --rate 100 &
send_pid=$!
bg_pids+=("$send_pid")
selector="$(reader_selector || true)"
[[ -n "$selector" ]] || die "scenario 3: no reader Deployment selector (is ${SOURCE}-reader there?)"
for round in 1 2 3 4; do
  sleep 5
  log "round $round: force-deleting reader pods ($selector)"
  k -n "$NS" delete pods -l "$selector" --grace-period=0 --force --wait=false || true
  if [[ $round -eq 2 ]]; then
    log "restarting the operator"
    k -n sluice-system rollout restart deploy/sluice-operator
  fi
done
if k -n sluice-system rollout status deploy/sluice-operator --timeout=300s; then
  pass "scenario 3: operator restarted"
else
  fail "scenario 3: operator did not come back"
fi
wait "$send_pid" || fail "scenario 3: sending failed"
wait_readers_ready "scenario 3" || true
total=$((total + 3000))
expect_delivered "$total" "scenario 3" 600

# ---------------------------------------------------------------------------------------------
log "scenario 4: deleting the SqsSource removes its children"
k -n "$NS" delete sqssource "$SOURCE" --wait=true --timeout=120s || fail "scenario 4: delete failed"
children_left() {
  k -n "$NS" get deploy,sa,role,rolebinding,pdb --ignore-not-found -o name 2>/dev/null \
    | grep -E "/${SOURCE}-reader$" || true
  k -n "$NS" get configmap --ignore-not-found -o name 2>/dev/null \
    | grep -E "/${SOURCE}-(config|checkpoint)$" || true
  k -n "$NS" get pods -l "$selector" --ignore-not-found -o name 2>/dev/null || true
}
deadline=$((SECONDS + 180))
left="$(children_left)"
while [[ -n "$left" && $SECONDS -lt $deadline ]]; do
  sleep 3
  left="$(children_left)"
done
if [[ -z "$left" ]]; then
  pass "scenario 4: Deployment, ConfigMaps, ServiceAccount, Role, RoleBinding, PodDisruptionBudget and pods gone"
  # Readers' lease ConfigMaps (<source>-lease-<pod>) carry no owner reference; report, not judged.
  leases="$(k -n "$NS" get configmap -o name 2>/dev/null | grep -c -E "/${SOURCE}-lease-" || true)"
  log "scenario 4: reader lease ConfigMaps left (not owned by the source, not judged): ${leases:-0}"
else
  fail "scenario 4: children left after deleting the source: $(tr '\n' ' ' <<<"$left")"
fi

# ---------------------------------------------------------------------------------------------
if [[ $failures -ne 0 ]]; then
  log "$failures check(s) FAILED"
  exit 1
fi
log "all checks passed"
