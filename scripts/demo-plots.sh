#!/usr/bin/env bash
# Pictures with real data: runs the demo (scripts/demo.sh: a burst into a queue, the operator scaling the
# readers) with an exactlyOnce variant of deploy/examples/minimal-http.yaml, so checkpoint epochs are
# committed too, while scripts/demo_plots.py scrapes the operator and every reader each second. Then it
# plots backlog, replicas desired vs ready, delivery rate and the open and committed epochs, computed as
# the dashboard's queries are, to docs/observability/*.png (raw samples: .sluice/plots/samples.csv).
#
#   scripts/demo-plots.sh [--seconds N] [demo.sh options...]
#
# matplotlib comes from PyPI into a venv under .sluice/plotvenv (created on first use).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=90
if [[ "${1:-}" == --seconds ]]; then seconds="$2"; shift 2; fi
readonly VENV=.sluice/plotvenv OUT=docs/observability WORK=.sluice/plots

if ! [[ -x "$VENV/bin/python3" ]] || ! "$VENV/bin/python3" -c 'import matplotlib' 2>/dev/null; then
  echo "demo-plots: installing matplotlib into $VENV (pip)"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q matplotlib
fi

mkdir -p "$WORK"
# minimal-http.yaml under exactlyOnce with 2 s epochs: the same burst, with checkpoints to plot.
sed 's/^spec:$/spec:\n  delivery:\n    guarantee: exactlyOnce\n    checkpointIntervalSeconds: 2/' \
  deploy/examples/minimal-http.yaml >"$WORK/exactly-once-http.yaml"

scripts/demo.sh --seconds "$seconds" --example "$WORK/exactly-once-http.yaml" "$@" &
demo_pid=$!
"$VENV/bin/python3" scripts/demo_plots.py --work .sluice/demo --demo-pid "$demo_pid" --out "$OUT" \
  --limit "$((seconds + 600))"
wait "$demo_pid"
