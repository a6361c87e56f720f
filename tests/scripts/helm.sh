#!/usr/bin/env bash
# Prints the path of a helm binary for the chart checks, building it first if needed.
#
# Why build it: helm is not packaged for these machines, but it is a Go program, and the Go module
# proxy serves it. tests/tools/helm/ pins it (go.mod, go.sum); this script builds that pin once
# into a cache outside the work tree, so every checkout and worktree shares one binary:
#
#   ${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}/helm/<version>/helm
#
# Idempotent: a binary already built from the same go.sum is reused; concurrent runs wait on one
# lock and build once. A cold build prints what it cost (wall and CPU time) on stderr.
#
# Environment: SLUICE_HELM, the path of a helm v4 binary to use instead (nothing is built).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly MODULE="$REPO_ROOT/tests/tools/helm"
readonly HELM_PACKAGE=helm.sh/helm/v4/cmd/helm

log() { echo "helm.sh: $*" >&2; }

if [[ -n "${SLUICE_HELM:-}" ]]; then
  [[ -x "$SLUICE_HELM" ]] || { log "SLUICE_HELM=$SLUICE_HELM is not an executable file"; exit 1; }
  echo "$SLUICE_HELM"
  exit 0
fi

version="$(awk '$1 == "helm.sh/helm/v4" && $2 ~ /^v/ { print $2; exit }' "$MODULE/go.mod")"
[[ -n "$version" ]] || { log "no helm.sh/helm/v4 requirement in $MODULE/go.mod"; exit 1; }
cache="${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}/helm/$version"
binary="$cache/helm"
# The stamp ties the binary to the exact module hashes it was built from.
pin="$(cat "$MODULE/go.mod" "$MODULE/go.sum" | sha256sum | cut -d' ' -f1)"

fresh() { [[ -x "$binary" && -f "$cache/stamp" && "$(cat "$cache/stamp")" == "$pin" ]]; }

if fresh; then
  echo "$binary"
  exit 0
fi
command -v go >/dev/null 2>&1 || {
  log "go not found: install Go 1.26+ (https://go.dev/dl) to build helm $version, or set SLUICE_HELM to a helm v4 binary"
  exit 1
}

mkdir -p "$cache"
exec 9>"$cache/lock"
flock 9
if ! fresh; then
  log "building helm $version from the Go module proxy into $cache (once per version)"
  tmp="$(mktemp -d "$cache/build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.metadata="
  TIMEFORMAT='%R %U %S'
  # -mod=readonly: every module must match go.sum as committed; nothing is resolved afresh.
  if ! { time (cd "$MODULE" && CGO_ENABLED=0 GOFLAGS=-mod=readonly \
      go build -trimpath -ldflags "$ldflags" -o "$tmp/helm" "$HELM_PACKAGE" 2>"$tmp/build.log"); } 2>"$tmp/time"; then
    cat "$tmp/build.log" >&2
    log "building helm $version failed (go build output above)"
    exit 1
  fi
  read -r wall user sys <"$tmp/time"
  mv "$tmp/helm" "$binary"
  echo "$pin" >"$cache/stamp"
  log "built helm $version in ${wall} s wall, $(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", u + s }') CPU-seconds (Go $(go env GOVERSION), $(du -h "$binary" | cut -f1) binary)"
fi
echo "$binary"
