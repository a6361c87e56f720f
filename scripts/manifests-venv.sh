#!/usr/bin/env bash
# Makes the manifest validators' venv if needed and prints its python: scripts/check-manifests.sh and
# scripts/check-helm.sh judge their objects with the same validators, pinned once here.
#
# The validators (PyPI kubernetes-validate, with the upstream Kubernetes schemas of every minor, and
# cloudcoil-models-prometheus-operator, the Prometheus Operator API generated from its CRDs) install
# into a project-local venv, .sluice/manifests/venv, pinned by scripts/manifests-constraints.txt; the
# venv is made again only when the pins or the interpreter change. Needs python3 (3.11+).
#
# Environment: SLUICE_PYTHON (the interpreter for the venv; default python3).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly PINS=(kubernetes-validate==1.37.0 cloudcoil-models-prometheus-operator==0.80.1.0)
readonly CONSTRAINTS="$REPO_ROOT/scripts/manifests-constraints.txt"
readonly HOME_DIR="$REPO_ROOT/.sluice/manifests"
readonly VENV="$HOME_DIR/venv"
readonly STAMP="$HOME_DIR/venv.stamp"

log() { echo "manifests-venv: $*" >&2; }

python="${SLUICE_PYTHON:-python3}"
command -v "$python" >/dev/null || { log "no $python on PATH: install Python 3.11+ or set SLUICE_PYTHON"; exit 1; }

mkdir -p "$HOME_DIR"
# One install at a time (the release workflow and a test run may share a checkout).
exec 9>"$HOME_DIR/lock"
flock 9
hash="$({ printf '%s\n' "${PINS[@]}"; cat "$CONSTRAINTS"; "$python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$VENV/bin/python" || ! -f "$STAMP" || "$(cat "$STAMP")" != "$hash" ]]; then
  log "installing ${PINS[*]} with $python into $VENV"
  rm -rf "$VENV" "$STAMP"
  "$python" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -c "$CONSTRAINTS" "${PINS[@]}" >&2
  # Written last, so an interrupted install is redone next time.
  echo "$hash" >"$STAMP"
fi
echo "$VENV/bin/python"
