#!/usr/bin/env bash
# Checks the Helm chart (deploy/helm/sluice) as users receive it, packaged (scripts/chart.py says
# what is checked: versions, lint, schemas, values.schema.json refusals, the same objects as kustomize):
#
#   scripts/check-helm.sh                     the check the test command runs
#   scripts/check-helm.sh release VERSION OUT_DIR
#                                             the release workflow: OUT_DIR/sluice-VERSION.tgz, checked
#                                             the same way; VERSION must be the chart's and the workspace's
#
# helm comes from tests/scripts/helm.sh (built once from the Go module proxy, or SLUICE_HELM); the
# validators from scripts/manifests-venv.sh. Needs kubectl (kustomize 5). A few seconds once both exist.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly CHART="$REPO_ROOT/deploy/helm/sluice"

log() { echo "check-helm: $*" >&2; }

mode=check
case "${1:-}" in
  "") ;;
  release)
    [[ $# -eq 3 ]] || { log "usage: scripts/check-helm.sh release VERSION OUT_DIR"; exit 2; }
    mode=release version="$2" out="$3"
    ;;
  *) log "usage: scripts/check-helm.sh [release VERSION OUT_DIR]"; exit 2 ;;
esac

command -v kubectl >/dev/null || { log "kubectl not found: install kubectl 1.30+ (it renders the kustomize side of the comparison)"; exit 1; }
helm="$(bash "$REPO_ROOT/tests/scripts/helm.sh")"
python="$(bash "$REPO_ROOT/scripts/manifests-venv.sh")"

if [[ "$mode" == release ]]; then
  mkdir -p "$out"
  dest="$out"
else
  dest="$(mktemp -d)"
  trap 'rm -rf "$dest"' EXIT
fi
# The chart reads deploy/ through links under files/; packaging copies what they point at, and
# helm says so for each link on stderr: keep that notice out of the output, show anything else.
if ! "$helm" package "$CHART" --destination "$dest" >"$dest/package.out" 2>"$dest/package.err"; then
  cat "$dest/package.out" "$dest/package.err" >&2
  log "helm package $CHART failed (above)"
  exit 1
fi
grep -v 'found symbolic link in path' "$dest/package.err" >&2 || true
tgz="$(sed -n 's/^Successfully packaged chart and saved it to: //p' "$dest/package.out")"
[[ -f "$tgz" ]] || { cat "$dest/package.out" >&2; log "helm package wrote no chart archive"; exit 1; }
rm -f "$dest/package.out" "$dest/package.err"
echo "check-helm: $("$helm" version --short) packaged $(basename "$tgz") ($(du -h "$tgz" | cut -f1))"

# -B: chart.py imports its neighbours; no __pycache__ left in scripts/.

if [[ "$mode" == release ]]; then
  "$python" -B "$REPO_ROOT/scripts/chart.py" release "$helm" "$tgz" "$version"
  echo "$tgz"
else
  "$python" -B "$REPO_ROOT/scripts/chart.py" check "$helm" "$tgz"
fi
