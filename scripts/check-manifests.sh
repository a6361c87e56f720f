#!/usr/bin/env bash
# Validates every manifest Sluice ships, offline (scripts/manifests.py says what against what):
#
#   scripts/check-manifests.sh                          the check the test command runs
#   scripts/check-manifests.sh release VERSION IMAGE OUT_DIR
#                                                       the release workflow: writes the install and
#                                                       monitoring manifests of VERSION into OUT_DIR,
#                                                       validated the same way
#
# The validators run in the venv scripts/manifests-venv.sh makes (pinned; made once). Needs python3
# (3.11+) and kubectl with kustomize 5. A run takes about 10 s once the venv exists.
#
# Environment: SLUICE_PYTHON (the interpreter for the venv; default python3).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

command -v kubectl >/dev/null || { echo "check-manifests: kubectl not found: install kubectl 1.30+ (it renders kustomizations offline)" >&2; exit 1; }
python="$(bash "$REPO_ROOT/scripts/manifests-venv.sh")"

if [[ $# -eq 0 ]]; then
  exec "$python" "$REPO_ROOT/scripts/manifests.py" check
fi
exec "$python" "$REPO_ROOT/scripts/manifests.py" "$@"
