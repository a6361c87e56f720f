#!/usr/bin/env bash
# Python peers for the S3 payload tests and benchmark, installed from PyPI into a project-local venv:
# boto3 (uploads, the baseline GetObject + POST loop) and the Amazon SQS Extended Client for Python
# (a client nobody here wrote). Pinned, so a test run means the same thing tomorrow.
#
#   tests/scripts/pyclients.sh     create .sluice/pyclients/venv (again only when the pins change),
#                                  then print the venv's python
set -euo pipefail

readonly REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly VENV="$REPO_ROOT/.sluice/pyclients/venv"
readonly STAMP="$REPO_ROOT/.sluice/pyclients/venv.stamp"
readonly PINS="amazon-sqs-extended-client==1.0.1 boto3==1.44.8 botocore==1.44.8 s3transfer==0.19.3"

# Serialise: the suites run their tests as parallel processes, and each may be first to install.
mkdir -p "$REPO_ROOT/.sluice/pyclients"
exec 9>"$REPO_ROOT/.sluice/pyclients/lock"
flock 9

if [[ ! -x "$VENV/bin/python" || "$(cat "$STAMP" 2>/dev/null)" != "$PINS" ]]; then
  python="$(ls -d "$HOME"/.pyenv/versions/3.1[1-3]*/bin/python3 2>/dev/null | tail -1 || true)"
  python="${python:-python3}"
  rm -rf "$VENV"
  "$python" -m venv "$VENV" >&2
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install --quiet $PINS >&2
  echo "$PINS" > "$STAMP"
fi
echo "$VENV/bin/python"
