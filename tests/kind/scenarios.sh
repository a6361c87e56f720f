#!/usr/bin/env bash
# The Sluice cluster scenarios, on any Kubernetes where the operator already runs: kind
# (tests/kind/run.sh) and the test command's real control plane with the process kubelet
# (tests/tests/kind_scenarios.rs). The caller installs the CRD and the operator; this script makes
# its own queues, applies a source, and prints one `PASS:`, `FAIL:` or `SKIP:` line per check.
#
# Environment (the caller's cluster, as seen from here and from the pods):
#   KUBECONFIG / KUBE_CONTEXT  the cluster (KUBE_CONTEXT optional: kubectl's current context)
#   NAMESPACE                  where the source and its readers go (default: default; created if missing)
#   SQS_ENDPOINT               LocalStack as this machine reaches it (e.g. http://127.0.0.1:14566)
#   POD_SQS_ENDPOINT           LocalStack as the pods reach it (default: SQS_ENDPOINT)
#   OPERATOR_NAMESPACE         the operator Deployment's namespace (default: sluice-system)
#   OPERATOR_DEPLOYMENT        its name (default: sluice-operator)
#   SLUICE_DEV                 the sluice-dev binary (default: target/debug/sluice-dev)
#   MESSAGES                   messages for scenario 1 (default: 5000)
#   ROLL_MESSAGES              messages sent during scenario 2's rollout (default: 2000)
#   CHAOS_MESSAGES             messages sent during scenario 3's pod deletions (default: 3000)
#   SEND_RATE                  messages/s while scenarios 2 and 3 disturb the readers (default: 100)
#   ROUND_SECONDS              seconds between scenario 3's four rounds of pod deletions (default: 5)
#   SKIP_RUNTIME_CHECKS        a reason: skip the checks only a container runtime can pass (each
#                              printed as SKIP with the reason); empty runs them
#   LOGS_DIR                   where pod logs are files (<namespace>_<pod>.log) when `kubectl logs`
#                              cannot serve them; used for the diagnostics printed on failure
#   SOURCE                     the SqsSource's name (default: kind-e2e)
#
# Exit status: 0 when every check that ran passed, 1 otherwise.
set -Eeuo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

NS="${NAMESPACE:-default}"
: "${SQS_ENDPOINT:?SQS_ENDPOINT: LocalStack as this machine reaches it}"
POD_SQS_ENDPOINT="${POD_SQS_ENDPOINT:-$SQS_ENDPOINT}"
OPERATOR_NAMESPACE="${OPERATOR_NAMESPACE:-sluice-system}"
OPERATOR_DEPLOYMENT="${OPERATOR_DEPLOYMENT:-sluice-operator}"
SLUICE_DEV="${SLUICE_DEV:-$repo/target/debug/sluice-dev}"
MESSAGES="${MESSAGES:-5000}"
ROLL_MESSAGES="${ROLL_MESSAGES:-2000}"
CHAOS_MESSAGES="${CHAOS_MESSAGES:-3000}"
SEND_RATE="${SEND_RATE:-100}"
ROUND_SECONDS="${ROUND_SECONDS:-5}"
SKIP_RUNTIME_CHECKS="${SKIP_RUNTIME_CHECKS:-}"
LOGS_DIR="${LOGS_DIR:-}"
SOURCE="${SOURCE:-kind-e2e}"
REGION=us-east-1
ACCOUNT=000000000000

err_line=""
failures=0
passes=0
skips=0
bg_pids=()

log() { printf '[scenarios %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
pass() { printf 'PASS: %s\n' "$*"; passes=$((passes + 1)); }
fail() { printf 'FAIL: %s\n' "$*"; failures=$((failures + 1)); }
skip() { printf 'SKIP: %s (%s)\n' "$1" "$SKIP_RUNTIME_CHECKS"; skips=$((skips + 1)); }
die() { printf 'FAIL: %s\n' "$*"; failures=$((failures + 1)); exit 1; }
ctx=()
if [[ -n "${KUBE_CONTEXT:-}" ]]; then ctx=(--context "$KUBE_CONTEXT"); fi
k() { kubectl "${ctx[@]}" "$@"; }
sdev() { "$SLUICE_DEV" --endpoint "$SQS_ENDPOINT" "$@"; }

# The last lines of a pod's log: through the API where a kubelet serves logs, else from LOGS_DIR.
pod_log_tail() { # namespace pod-name-prefix
  if [[ -n "$LOGS_DIR" ]]; then
    local f
    for f in "$LOGS_DIR/${1}_${2}"*.log; do
      [[ -f "$f" ]] || continue
      printf -- '--- %s\n' "$f"
      tail -n 20 "$f"
    done
  else
    k -n "$1" logs "deploy/$2" --tail=40 2>/dev/null || true
  fi
}

finish() {
  local rc=$?
  for pid in "${bg_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [[ $rc -ne 0 && $failures -eq 0 ]]; then
    fail "the script stopped at line ${err_line:-?} with exit status $rc"
  fi
  if [[ $rc -ne 0 || $failures -ne 0 ]]; then
    log "diagnostics (last lines of the operator's and readers' logs)"
    pod_log_tail "$OPERATOR_NAMESPACE" "$OPERATOR_DEPLOYMENT"
    pod_log_tail "$NS" "${SOURCE}-reader"
    k get pods -A 2>/dev/null || true
    [[ $rc -ne 0 ]] || rc=1
  fi
  log "checks: ${passes} passed, ${failures} failed, ${skips} skipped"
  exit "$rc"
}
trap finish EXIT
# An unexpected stop (set -e) names its line in a FAIL line rather than ending silently.
trap 'err_line=$LINENO' ERR
trap 'exit 130' INT TERM

[[ -x "$SLUICE_DEV" ]] || die "no sluice-dev at $SLUICE_DEV (cargo build -p sluice-tests --bin sluice-dev)"
command -v kubectl >/dev/null 2>&1 || die "kubectl not found"

# ---------------------------------------------------------------------------------------------
# The operator as the caller deployed it.
if k -n "$OPERATOR_NAMESPACE" rollout status "deploy/$OPERATOR_DEPLOYMENT" --timeout=300s; then
  pass "operator Deployment $OPERATOR_NAMESPACE/$OPERATOR_DEPLOYMENT rolled out"
else
  die "operator Deployment $OPERATOR_NAMESPACE/$OPERATOR_DEPLOYMENT not rolled out"
fi
if k -n "$OPERATOR_NAMESPACE" get pdb "$OPERATOR_DEPLOYMENT" >/dev/null 2>&1 \
  && k -n "$OPERATOR_NAMESPACE" get svc "$OPERATOR_DEPLOYMENT" >/dev/null 2>&1; then
  pass "operator PodDisruptionBudget and Service installed"
else
  fail "operator PodDisruptionBudget or Service missing"
fi

# ---------------------------------------------------------------------------------------------
# Queues: names unique per run so a reused cluster starts from empty queues.
run_id="$(date +%s)-$$"
src_q="kind-src-${run_id}"
out_q="kind-out-${run_id}"
src_url="$(sdev create-queue "$src_q" --visibility 5)"
out_url="$(sdev create-queue "$out_q")"
log "source queue $src_url"
log "output queue $out_url"
out_url_for_pods="${POD_SQS_ENDPOINT}/queue/${REGION}/${ACCOUNT}/${out_q}"

# field value of `sluice-dev counts`: visible / in_flight / delayed
count_of() { # queue_url field
  local line
  if ! line="$(sdev counts "$1" 2>/dev/null)"; then
    # a dropped port-forward (kind) is the usual cause: the caller reopens it; retry once
    sleep 3
    line="$(sdev counts "$1")" || { echo -1; return; }
  fi
  sed -n "s/.*\b$2=\([0-9]*\).*/\1/p" <<<"$line"
}

# Waits until the output queue holds at least $1 messages and the source queue is empty, then
# judges: fewer than $1 is loss (FAIL); more is at-least-once duplicates (reported, as the Rust
# e2e suites allow them). Counting is by LocalStack's ApproximateNumberOfMessages (exact on
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
    sleep 2
  done
  # let stragglers (duplicates) land before judging
  sleep 3
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

# pod/<name> of one reader, or nothing. (No `| head` or `| grep -q` on kubectl's output: under
# pipefail a reader that stops early makes kubectl's SIGPIPE the pipeline's status.)
first_reader_pod() {
  local names first
  names="$(k -n "$NS" get pods -l "$(reader_selector)" -o jsonpath='{.items[*].metadata.name}')"
  read -r first _ <<<"$names" || true
  if [[ -n "$first" ]]; then echo "pod/$first"; fi
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
      endpoint: ${POD_SQS_ENDPOINT}
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
        queueUrl: ${out_url_for_pods}
        region: ${REGION}
        endpoint: ${POD_SQS_ENDPOINT}
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

# The reader pods as spec.reader shaped them, with no privileges they do not use: fields the
# operator wrote, so they hold on any API server.
check_reader_pod_spec() { # label
  local pod
  pod="$(first_reader_pod)"
  [[ -n "$pod" ]] || { fail "$1: no reader pod"; return; }
  local jp='{.spec.automountServiceAccountToken} {.spec.containers[0].resources.requests.memory} {.metadata.labels.team} {.spec.containers[0].securityContext.readOnlyRootFilesystem} {.spec.containers[0].securityContext.allowPrivilegeEscalation} {.spec.securityContext.runAsNonRoot} {.spec.containers[0].securityContext.capabilities.drop[0]}'
  local got
  got="$(k -n "$NS" get "$pod" -o jsonpath="$jp")"
  if [[ "$got" == "true 48Mi e2e true false true ALL" ]]; then
    pass "$1: reader pod spec shaped from spec.reader, API token for its sink health report, read-only root fs, non-root, no privilege escalation, ALL capabilities dropped"
  else
    fail "$1: reader pod fields are '$got', want 'true 48Mi e2e true false true ALL'"
  fi
  local env_names
  env_names="$(k -n "$NS" get "$pod" -o jsonpath='{.spec.containers[0].env[*].name}')"
  if grep -qw AWS_ROLE_ARN <<<"$env_names"; then
    fail "$1: the reader sets AWS_ROLE_ARN, which belongs to the EKS pod identity webhook"
  else
    pass "$1: no AWS_ROLE_ARN on the reader"
  fi
  if [[ "$(k -n "$NS" get pdb "${SOURCE}-reader" -o jsonpath='{.spec.maxUnavailable}' 2>/dev/null)" == "1" ]]; then
    pass "$1: readers' PodDisruptionBudget (maxUnavailable 1)"
  else
    fail "$1: no PodDisruptionBudget ${SOURCE}-reader with maxUnavailable 1"
  fi
  local listed
  listed="$(k -n "$NS" get sluice -o name 2>/dev/null || true)"
  if grep -q "sqssource.*/${SOURCE}$" <<<"$listed"; then
    pass "$1: kubectl get sluice lists the source"
  else
    fail "$1: kubectl get sluice does not list ${SOURCE}"
  fi
}

# What only a container runtime shows: the container it created from the image and the log it
# serves. A node that runs pods as processes (the test command's kubelet) skips these by name.
check_reader_pod_runtime() { # label
  local checks=(
    "$1: the runtime created the reader container from an image (imageID set) and runs it under runAsNonRoot"
    "$1: kubectl logs serves the reader's log"
  )
  if [[ -n "$SKIP_RUNTIME_CHECKS" ]]; then
    local c
    for c in "${checks[@]}"; do skip "$c"; done
    return
  fi
  local pod got
  pod="$(first_reader_pod)"
  [[ -n "$pod" ]] || { fail "$1: no reader pod"; return; }
  # A kubelet refuses to start a runAsNonRoot container whose image runs as root, so a running
  # container is the runtime's verdict on the image's user.
  got="$(k -n "$NS" get "$pod" -o jsonpath='{.status.containerStatuses[0].imageID}|{.status.containerStatuses[0].state.running.startedAt}')"
  if [[ "$got" == ?*'|'?* ]]; then
    pass "${checks[0]}"
  else
    fail "${checks[0]}: container status imageID|startedAt is '$got'"
  fi
  if [[ -n "$(k -n "$NS" logs "$pod" --tail=5 2>/dev/null)" ]]; then
    pass "${checks[1]}"
  else
    fail "${checks[1]}: kubectl logs $pod returned nothing"
  fi
}

# A fresh start when the cluster is reused.
k create namespace "$NS" --dry-run=client -o yaml | k apply -f - >/dev/null
k -n "$NS" delete sqssource "$SOURCE" --ignore-not-found --wait=true
k -n "$NS" create secret generic localstack-credentials \
  --from-literal=AWS_ACCESS_KEY_ID=test --from-literal=AWS_SECRET_ACCESS_KEY=test \
  --dry-run=client -o yaml | k apply -f -

# ---------------------------------------------------------------------------------------------
log "scenario 1: apply -> readers Ready -> ${MESSAGES} delivered"
render_source 2 | k apply -f -
wait_readers_ready "scenario 1" || true
check_reader_pod_spec "scenario 1"
check_reader_pod_runtime "scenario 1"
sdev send "$src_url" --count "$MESSAGES"
total=$MESSAGES
expect_delivered "$total" "scenario 1" 600

# ---------------------------------------------------------------------------------------------
log "scenario 2: spec change (receive.pollers 2 -> 3) rolls the readers without loss"
old_hash="$(k -n "$NS" get deploy "${SOURCE}-reader" \
  -o jsonpath='{.spec.template.metadata.annotations.sluice\.dev/config-hash}')"
sdev send "$src_url" --count "$ROLL_MESSAGES" --rate "$SEND_RATE" &
send_pid=$!
bg_pids+=("$send_pid")
sleep 3
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
total=$((total + ROLL_MESSAGES))
expect_delivered "$total" "scenario 2" 600

# ---------------------------------------------------------------------------------------------
log "scenario 3: reader pods force-deleted repeatedly and the operator restarted, without loss"
sdev send "$src_url" --count "$CHAOS_MESSAGES" --rate "$SEND_RATE" &
send_pid=$!
bg_pids+=("$send_pid")
selector="$(reader_selector || true)"
[[ -n "$selector" ]] || die "scenario 3: no reader Deployment selector (is ${SOURCE}-reader there?)"
for round in 1 2 3 4; do
  sleep "$ROUND_SECONDS"
  log "round $round: force-deleting reader pods ($selector)"
  k -n "$NS" delete pods -l "$selector" --grace-period=0 --force --wait=false || true
  if [[ $round -eq 2 ]]; then
    log "restarting the operator"
    k -n "$OPERATOR_NAMESPACE" rollout restart "deploy/$OPERATOR_DEPLOYMENT"
  fi
done
if k -n "$OPERATOR_NAMESPACE" rollout status "deploy/$OPERATOR_DEPLOYMENT" --timeout=300s; then
  pass "scenario 3: operator restarted"
else
  fail "scenario 3: operator did not come back"
fi
wait "$send_pid" || fail "scenario 3: sending failed"
wait_readers_ready "scenario 3" || true
total=$((total + CHAOS_MESSAGES))
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
  sleep 2
  left="$(children_left)"
done
if [[ -z "$left" ]]; then
  pass "scenario 4: Deployment, ConfigMaps, ServiceAccount, RoleBinding, PodDisruptionBudget and pods gone"
  # Readers' lease ConfigMaps (<source>-lease-<pod>) carry no owner reference; report, not judged.
  leases="$(k -n "$NS" get configmap -o name 2>/dev/null | grep -c -E "/${SOURCE}-lease-" || true)"
  log "scenario 4: reader lease ConfigMaps left (not owned by the source, not judged): ${leases:-0}"
else
  fail "scenario 4: children left after deleting the source: $(tr '\n' ' ' <<<"$left")"
fi

if [[ $failures -ne 0 ]]; then
  log "$failures check(s) FAILED"
  exit 1
fi
log "all checks passed"
