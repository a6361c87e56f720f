#!/usr/bin/env bash
# The real Kubernetes control plane's binaries, built once per version from pinned Go modules.
#
#   tests/scripts/kube-binaries.sh [MINOR]   build if needed, then print the directory holding
#                                           kube-apiserver, kube-controller-manager, kube-scheduler
#                                           and etcd for Kubernetes MINOR (default: the newest we pin)
#   tests/scripts/kube-binaries.sh versions  print the Kubernetes versions pinned here, newest first
#
# The versions live in one place each: tests/controlplane/go/kube-<MINOR>/go.mod names k8s.io/kubernetes
# (its staging modules replaced by the matching v0.x.y, since k8s.io/kubernetes itself points them at
# local paths and so cannot be `go install`ed), tests/controlplane/go/etcd/go.mod names etcd's server.
# The binaries go to a cache outside the work tree, keyed by the version and the module's go.sum, so a
# fresh clone reuses them and a changed pin builds anew.
#
# KUBEBUILDER_ASSETS (the envtest convention: a directory with kube-apiserver, etcd and perhaps the
# others, as setup-envtest installs them) is honoured: every binary found there is used as it is, and
# only the missing ones are built (setup-envtest ships no controller-manager or scheduler).
#
# Cost: the first build of one Kubernetes version takes about ten minutes on 2 cores and needs Go 1.26+
# (it downloads about 1 GB of modules into Go's module cache); later calls return at once.
#
# Environment: SLUICE_CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/sluice), KUBEBUILDER_ASSETS.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly MODULES="$SCRIPT_DIR/../controlplane/go"
readonly CACHE="${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}"

log() { echo "kube-binaries: $*" >&2; }

# Pinned minors, newest first, from the module directories' names.
minors() {
  local dir
  for dir in "$MODULES"/kube-*/; do basename "$dir" | sed 's/^kube-//'; done | sort -t. -k1,1nr -k2,2nr
}

# The version a go.mod requires of a module: `pinned go.mod k8s.io/kubernetes` prints 1.37.2.
pinned() {
  awk -v m="$2" '$1 == m && $2 ~ /^v/ { sub(/^v/, "", $2); print $2; exit }
                 $1 == "require" && $2 == m { sub(/^v/, "", $3); print $3; exit }' "$1"
}

need_go() {
  if ! command -v go >/dev/null 2>&1; then
    log "Go is not installed: install Go 1.26+ (https://go.dev/dl), or point KUBEBUILDER_ASSETS at a directory with $1"
    exit 1
  fi
}

# build MODULE_DIR OUT_DIR LDFLAGS PACKAGE... : `go build` the packages into OUT_DIR, atomically.
build() {
  local module="$1" out="$2" ldflags="$3"
  shift 3
  local started=$SECONDS tmp
  mkdir -p "$(dirname "$out")"
  tmp="$(mktemp -d "$out.tmp.XXXXXX")"
  [[ -d "$tmp" ]] || { log "could not make a directory beside $out"; exit 1; }
  log "building ${*##*/} from $(basename "$module") into $out (first time only)"
  (cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$tmp/" "$@") >&2
  rm -rf "$out"
  mv "$tmp" "$out"
  log "built in $((SECONDS - started)) s: $(du -sh "$out" | cut -f1) in $out"
}

kube_dir() {
  local minor="$1" module="$MODULES/kube-$1"
  [[ -f "$module/go.mod" ]] || { log "no pinned Kubernetes $minor: pinned are $(minors | tr '\n' ' ')"; exit 2; }
  local version sum out
  version="$(pinned "$module/go.mod" k8s.io/kubernetes)"
  sum="$(sha256sum "$module/go.sum" | cut -c1-12)"
  out="$CACHE/kubernetes/v$version-$sum"
  if [[ ! -x "$out/kube-scheduler" ]]; then
    need_go "kube-apiserver, kube-controller-manager and kube-scheduler"
    local major="${version%%.*}" minor_only
    minor_only="$(cut -d. -f2 <<<"$version")"
    local v=k8s.io/component-base/version
    build "$module" "$out" \
      "-X $v.gitVersion=v$version -X $v.gitMajor=$major -X $v.gitMinor=$minor_only -X $v.gitTreeState=clean" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler
  fi
  echo "$out"
}

etcd_dir() {
  local module="$MODULES/etcd" version sum out
  version="$(pinned "$module/go.mod" go.etcd.io/etcd/server/v3)"
  sum="$(sha256sum "$module/go.sum" | cut -c1-12)"
  out="$CACHE/etcd/v$version-$sum"
  if [[ ! -x "$out/etcd" ]]; then
    need_go etcd
    # `go build .` names the binary after the module path's last element: etcd.
    build "$module" "$out" "" .
  fi
  echo "$out"
}

main() {
  local arg="${1:-}"
  if [[ "$arg" == versions ]]; then
    local m
    for m in $(minors); do pinned "$MODULES/kube-$m/go.mod" k8s.io/kubernetes; done
    return
  fi
  local minor="${arg:-$(minors | head -1)}"
  mkdir -p "$CACHE"
  # One build at a time per cache: parallel test processes may all ask at once.
  exec 9>"$CACHE/kube-binaries.lock"
  flock 9
  local kube etcd assets out
  kube="" etcd=""
  assets="${KUBEBUILDER_ASSETS:-}"
  if [[ -n "$assets" && -x "$assets/kube-apiserver" && -x "$assets/kube-controller-manager" \
        && -x "$assets/kube-scheduler" && -x "$assets/etcd" ]]; then
    echo "$assets"
    return
  fi
  kube="$(kube_dir "$minor")"
  etcd="$(etcd_dir)"
  # One directory with all four (links), as KUBEBUILDER_ASSETS would be.
  out="$CACHE/controlplane/$(basename "$kube")+$(basename "$etcd")"
  if [[ -n "$assets" ]]; then out="$out+assets-$(echo "$assets" | sha256sum | cut -c1-8)"; fi
  mkdir -p "$out"
  local bin src
  for bin in kube-apiserver kube-controller-manager kube-scheduler etcd; do
    src="$kube/$bin"
    [[ "$bin" == etcd ]] && src="$etcd/etcd"
    if [[ -n "$assets" && -x "$assets/$bin" ]]; then src="$assets/$bin"; fi
    ln -sfn "$src" "$out/$bin"
  done
  echo "$out"
}

main "$@"
