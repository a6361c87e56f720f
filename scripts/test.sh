#!/usr/bin/env bash
# THE test command: from a fresh clone to a green (or red) suite, with nothing installed beforehand but
# Rust, Go 1.26+ (the real Kubernetes control plane builds from pinned Go modules, once per version, into
# a cache outside the work tree, tests/scripts/kube-binaries.sh; helm builds the same way for the chart
# checks), kubectl, and a Python 3.13 (LocalStack's host mode needs it; tests/scripts/localstack.sh finds
# it or says how to get one).
#
# Why one script: CI (.ci/run) and people run exactly the same steps, in the same order, with the same
# LocalStack. It formats-checks, lints, and runs every workspace test (unit, schema/CEL, CRD drift,
# integration against LocalStack). LocalStack is started here and stopped on exit, but only when this
# script was the one to start it: a server you already had running is left alone.
#
# Environment: SLUICE_LOCALSTACK_PORT (default 4566); SLUICE_TEST_RUNNER=nextest|cargo to force a runner.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
readonly LOCALSTACK=tests/scripts/localstack.sh
readonly START_LOG=.sluice/localstack/test-start.out

step() { printf '\n==> %s\n' "$*"; }

# Waits for the background job whose id the variable named $1 holds and prints its log $2; when the
# job failed, prints the log to stderr with "test.sh: $3 (see above)" and exits. The variable is
# emptied either way, so the exit trap does not signal a finished job's process group.
await_job() {
  local var=$1 log=$2 failure=$3
  local job=${!var}
  [[ -n "$job" ]] || return 0
  if ! wait "$job"; then
    printf -v "$var" '%s' ""
    cat "$log" >&2
    echo "test.sh: $failure (see above)" >&2
    exit 1
  fi
  printf -v "$var" '%s' ""
  cat "$log"
}

if ! command -v cargo >/dev/null 2>&1; then
  echo "test.sh: cargo not found. Install Rust 1.95+ with https://rustup.rs, then run this again." >&2
  exit 1
fi
for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null 2>&1; then
      rustup component add "$component"
    else
      echo "test.sh: cargo $component is missing; install the Rust component '$component'." >&2
      exit 1
    fi
  fi
done

# The control plane's binaries build in the background while cargo builds (first run: about ten
# minutes of Go on 2 cores, then cached): the newest pinned Kubernetes for every suite, and the oldest
# supported one for its smoke test.
mkdir -p .sluice
readonly KUBE_LOG=.sluice/kube-binaries.out
setsid bash -c 'for minor in $(bash tests/scripts/kube-binaries.sh versions | cut -d. -f1,2); do
    bash tests/scripts/kube-binaries.sh "$minor" || exit 1; done' >"$KUBE_LOG" 2>&1 &
kube_job=$!

# cargo-nextest runs each test in a process of its own (a suite's SIGKILLs and env stay its own);
# installed from crates.io when missing, beside the build.
nextest_job=""
if [[ -z "${SLUICE_TEST_RUNNER:-}" ]] && ! cargo nextest --version >/dev/null 2>&1; then
  echo "test.sh: installing cargo-nextest from crates.io (first run only)"
  setsid cargo install --locked cargo-nextest@0.9.151 >.sluice/nextest-install.out 2>&1 &
  nextest_job=$!
fi

# LocalStack installs (first run: about a minute) and starts in the background while cargo lints.
mkdir -p .sluice/localstack
started_localstack=no
localstack_job=""
if "$LOCALSTACK" status >/dev/null 2>&1; then
  echo "test.sh: using the LocalStack already running"
else
  started_localstack=yes
  # Its own process group, so an early exit can stop the whole install (pip included) by that one id.
  setsid "$LOCALSTACK" start >"$START_LOG" 2>&1 &
  localstack_job=$!
fi
cluster_pid=""
checks_job=""
cleanup() {
  if [[ -n "$cluster_pid" ]]; then
    # SIGTERM: the kubelet stops the pods within their grace, then the control plane stops.
    kill -TERM "$cluster_pid" 2>/dev/null || true
    wait "$cluster_pid" 2>/dev/null || true
  fi
  for job in "$kube_job" "$nextest_job" "$checks_job"; do
    if [[ -n "$job" ]]; then kill -TERM -- "-$job" 2>/dev/null || true; fi
  done
  if [[ -n "$localstack_job" ]]; then kill -TERM -- "-$localstack_job" 2>/dev/null || true; fi
  if [[ "$started_localstack" == yes ]]; then "$LOCALSTACK" stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "cargo fmt --all -- --check"
cargo fmt --all -- --check

step "dependency graph: one HTTP stack, one TLS provider"
bash scripts/check-deps.sh

step "alert rules: promtool check and unit tests"
bash scripts/check-alerts.sh

step "image: the Dockerfile's build context loads the workspace (locked, offline)"
bash scripts/check-image-context.sh

# The manifest, chart and link checks run beside the build (their results are printed after it):
# about a minute of mostly single-threaded Python and helm (a venv made in a fresh clone; helm built
# once from the Go module proxy, a few CPU-minutes, cached outside the work tree) that would
# otherwise hold up the compile.
readonly CHECKS_LOG=.sluice/checks.out
setsid bash -c 'set -e
  printf "\n==> %s\n" "manifests: every kustomize output, CRD and example against the Kubernetes, CRD and Prometheus Operator schemas"
  bash scripts/check-manifests.sh
  printf "\n==> %s\n" "helm chart: lint, renders against the same schemas, values schema refusals, the same objects as kustomize"
  bash scripts/check-helm.sh
  printf "\n==> %s\n" "Markdown: every relative link and #anchor resolves"
  python3 scripts/check-links.py' >"$CHECKS_LOG" 2>&1 &
checks_job=$!

step "no function over 80 lines in the reader and the operator"
bash scripts/long-functions.sh

# One compile serves the lints and the tests. `cargo clippy` would type-check every dependency a second
# time (as metadata only, which no test can reuse), so instead clippy-driver runs as the workspace's rustc
# wrapper (exactly how `cargo clippy` runs it) during the real build of every target: the workspace's own
# crates are linted with `-D warnings` while they are compiled, dependencies are built once. The same
# variables stay set for every cargo call below so that the test runs find these artifacts fresh.
export RUSTC_WORKSPACE_WRAPPER=clippy-driver
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# A clean CI build gains nothing from incremental caches and pays for writing them.
if [[ "${CI:-}" == true ]]; then export CARGO_INCREMENTAL=0; fi
# The end-to-end suites run the binaries as processes (local control plane, operator, readers); building
# every target here (bins, tests, examples) means the test runner below compiles nothing more.
step "cargo build --workspace --all-targets, linted by clippy (-D warnings)"
cargo build --workspace --all-targets

step "manifests, helm chart, Markdown links (run beside the build)"
await_job checks_job "$CHECKS_LOG" "a manifest, chart or link check failed"

step "LocalStack"
await_job localstack_job "$START_LOG" "LocalStack did not start"
eval "$("$LOCALSTACK" env)"
echo "SLUICE_LOCALSTACK_ENDPOINT=$SLUICE_LOCALSTACK_ENDPOINT"

step "Kubernetes: the real control plane (binaries from pinned Go modules) and the process kubelet"
kube_started=$SECONDS
await_job kube_job "$KUBE_LOG" "the control plane's binaries could not be built"
echo "test.sh: control plane binaries ready (waited $((SECONDS - kube_started)) s after the build)"
SLUICE_KUBE_BINARIES="$(bash tests/scripts/kube-binaries.sh)"
export SLUICE_KUBE_BINARIES
# One cluster for the whole run, a namespace per suite (as envtest users share one per package); the
# suites that take the control plane down start private ones.
readonly CLUSTER_DIR="$PWD/.sluice/cluster"
rm -rf "$CLUSTER_DIR"
mkdir -p "$CLUSTER_DIR"
target/debug/sluice-controlplane up --dir "$CLUSTER_DIR" --bin-dir "$PWD/target/debug" \
  >"$CLUSTER_DIR/sluice-controlplane.log" 2>&1 &
cluster_pid=$!
for _ in $(seq 1 600); do
  [[ -f "$CLUSTER_DIR/cluster.json" ]] && break
  if ! kill -0 "$cluster_pid" 2>/dev/null; then
    cat "$CLUSTER_DIR/sluice-controlplane.log" >&2
    echo "test.sh: the test cluster did not start (log above)" >&2
    cluster_pid=""
    exit 1
  fi
  sleep 0.5
done
[[ -f "$CLUSTER_DIR/cluster.json" ]] || { echo "test.sh: the test cluster did not start in 300 s" >&2; exit 1; }
export SLUICE_CLUSTER="$CLUSTER_DIR"
grep -E "cluster ready" "$CLUSTER_DIR/sluice-controlplane.log" || true
echo "KUBECONFIG=$CLUSTER_DIR/controlplane/admin.kubeconfig"

if [[ -n "$nextest_job" ]]; then
  if ! wait "$nextest_job"; then
    tail -5 .sluice/nextest-install.out >&2
    echo "test.sh: cargo-nextest did not install; running the suites with cargo test" >&2
  fi
  nextest_job=""
fi

# The CRD drift check and the example validation are tests in the workspace; they run here.
runner="${SLUICE_TEST_RUNNER:-}"
if [[ -z "$runner" ]]; then
  if cargo nextest --version >/dev/null 2>&1; then runner=nextest; else runner=cargo; fi
fi
if [[ "$runner" == nextest ]]; then
  # nextest does not run doctests; run them first (only if there are any: rustdoc re-reads every crate,
  # which costs minutes on 2 cores for nothing) so nextest's summary is the last line.
  # A Rust block opens with a bare fence or one tagged rust; ```json and the like are not tests.
  # shellcheck disable=SC2046 # the file list: a few hundred paths without spaces
  if awk '
      /^[[:space:]]*\/\/[\/!] ?```/ {
        tag = $0; sub(/^[[:space:]]*\/\/[\/!] ?```/, "", tag)
        if (!open && (tag == "" || tag ~ /^rust/)) { found = 1 }
        open = !open
      }
      END { exit !found }' $(find crds/src operator/src reader/src tests/src -name '*.rs'); then
    step "cargo test --workspace --doc"
    cargo test --workspace --doc
  fi
  step "cargo nextest run --workspace"
  # The protocol's model check is one of the suites; it prints how many states it explored
  # (.config/nextest.toml shows its output on success).
  cargo nextest run --workspace --no-fail-fast
else
  step "cargo test --workspace"
  cargo test --workspace --no-fail-fast
fi
