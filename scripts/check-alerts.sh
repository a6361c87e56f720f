#!/usr/bin/env bash
# Checks the alert rules of deploy/observability/prometheusrule.yaml with promtool: `promtool check
# rules` (syntax, PromQL, templates) and `promtool test rules` (deploy/observability/tests/*.yaml: the
# alerts fire, and stay quiet, on the series given there).
#
# promtool comes from Debian's `prometheus` package. When it is missing and CI=true this script installs
# it with apt-get (and says so); elsewhere it asks you to install it and exits 1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v promtool >/dev/null; then
  if [[ "${CI:-}" == true ]]; then
    echo "check-alerts: promtool is missing; installing Debian's prometheus package with apt-get (CI=true)"
    sudo_cmd=()
    [[ "$(id -u)" == 0 ]] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    echo "check-alerts: promtool not found: install Debian's prometheus package (apt-get install prometheus), or run with CI=true to let this script do it" >&2
    exit 1
  fi
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The PrometheusRule's spec is a Prometheus rule file (its `groups:`), indented by two spaces.
sed -n '/^spec:$/,$p' deploy/observability/prometheusrule.yaml | tail -n +2 | sed 's/^  //' >"$work/rules.yaml"
cp deploy/observability/tests/*.yaml "$work/"

promtool check rules "$work/rules.yaml"
(cd "$work" && for test in "$work"/*_test.yaml; do promtool test rules "$(basename "$test")"; done)
echo "check-alerts: rules and their unit tests pass"
