#!/usr/bin/env bash
# Installs the bench's peer consumers (reader/examples/bench_vs_loop/peers) into .sluice/bench-peers,
# idempotently: the npm `sqs-consumer` library with the AWS SDK for JavaScript v3, and boto3 in a
# virtualenv. Only `bench_vs_loop compare --peer ...` uses them; the test command does not.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
readonly DIR=.sluice/bench-peers
mkdir -p "$DIR/node"
if [[ ! -d "$DIR/node/node_modules/sqs-consumer" ]]; then
  command -v npm >/dev/null || { echo "bench-peers.sh: npm not found; install Node.js 20+" >&2; exit 1; }
  (cd "$DIR/node" && npm install --silent --no-audit --no-fund sqs-consumer@14 @aws-sdk/client-sqs@3)
fi
if [[ ! -x "$DIR/venv/bin/python" ]] || ! "$DIR/venv/bin/python" -c 'import boto3' 2>/dev/null; then
  python3 -m venv "$DIR/venv"
  "$DIR/venv/bin/pip" install --quiet 'boto3>=1.40,<2'
fi
echo "sqs-consumer $(node -p "require('./$DIR/node/node_modules/sqs-consumer/package.json').version"), \
boto3 $("$DIR/venv/bin/python" -c 'import boto3; print(boto3.__version__)')"
