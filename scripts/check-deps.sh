#!/usr/bin/env bash
# Fails when the workspace's dependency graph holds two of what it should hold one of: two
# semver-incompatible versions of hyper, http, h2, http-body or rustls (the AWS SDK's legacy client
# brings hyper 0.14 / rustls 0.21 beside kube's and reqwest's hyper 1), or a second rustls crypto
# provider (ring beside aws-lc-rs, which makes rustls refuse to pick one and every binary install one
# by hand). Why a script and not cargo-deny: cargo-deny is one more tool to build on a fresh machine
# (minutes on 2 cores) for five names; `cargo tree` is already here and reads the same lock file.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

readonly SINGLE=(hyper http h2 http-body rustls)
readonly FORBIDDEN=(ring)
readonly REQUIRED=(aws-lc-rs)

# Every package version in the graph of every member, dev and build edges included, one per line.
graph=$(cargo tree --workspace --edges normal,build,dev --prefix none --format '{p}' 2>/dev/null |
  awk '{print $1, $2}' | sort -u)

failed=0
for name in "${SINGLE[@]}"; do
  # The semver-compatible part: the major version, or 0.minor below 1.0.
  versions=$(awk -v n="$name" '$1 == n {print $2}' <<<"$graph" |
    sed -E 's/^v//; s/^0\.([0-9]+)\..*/0.\1/; s/^([1-9][0-9]*)\..*/\1/' | sort -u)
  count=$(grep -c . <<<"$versions" || true)
  if ((count > 1)); then
    echo "check-deps: $name is in the graph in $count incompatible versions ($(tr '\n' ' ' <<<"$versions"| sed 's/ $//')); run 'cargo tree -i $name@<version>' to see who brings the older one" >&2
    failed=1
  fi
done
for name in "${FORBIDDEN[@]}"; do
  if awk -v n="$name" '$1 == n {found=1} END {exit !found}' <<<"$graph"; then
    echo "check-deps: $name is in the graph; the workspace uses aws-lc-rs as its only rustls provider (Cargo.toml, 'TLS'); run 'cargo tree -i $name' to see who brings it" >&2
    failed=1
  fi
done
for name in "${REQUIRED[@]}"; do
  if ! awk -v n="$name" '$1 == n {found=1} END {exit !found}' <<<"$graph"; then
    echo "check-deps: $name is not in the graph; the TLS features in Cargo.toml no longer select it" >&2
    failed=1
  fi
done
if ((failed)); then exit 1; fi
echo "check-deps: one version each of ${SINGLE[*]}; one crypto provider (${REQUIRED[*]})"
