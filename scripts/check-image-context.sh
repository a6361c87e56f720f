#!/usr/bin/env bash
# Checks that deploy/Dockerfile can build: rebuilds the files its build stage sees (the build context
# from the COPY lines and deploy/Dockerfile.dockerignore, by scripts/image_context.py) and asks cargo to
# load the workspace from them, locked and offline, as `cargo build --release --locked` in the image
# does first. A workspace member the context leaves out, or a Cargo.lock the context cannot honour,
# fails here instead of in the release workflow. Also refuses CARGO_PROFILE_* overrides in the
# Dockerfile: the image ships the root Cargo.toml's release profile, the one BENCHMARKS.md measures.
#
# No container engine is needed (none runs on the development machines); the base images are not
# pulled. Idempotent; takes about a second once the crates are in cargo's cache.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
readonly DOCKERFILE="${1:-deploy/Dockerfile}"

failed=no
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The offline load below reads dependency manifests from cargo's cache: fill it from the real workspace
# (a no-op when the crates are already there, as after any build).
cargo fetch --locked --quiet
IFS=$'\t' read -r workdir copied < <(python3 scripts/image_context.py "$DOCKERFILE" "$work/root")
echo "check-image-context: $copied files of the build context reach $workdir in the build stage"
if ! cargo metadata --locked --offline --format-version 1 --manifest-path "$work/root$workdir/Cargo.toml" \
  >"$work/metadata.json" 2>"$work/cargo.err"; then
  cat "$work/cargo.err" >&2
  echo "check-image-context: cargo cannot load the workspace from $DOCKERFILE's build context (above): every member must reach the build stage" >&2
  failed=yes
else
  members="$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["workspace_members"]))' "$work/metadata.json")"
  echo "check-image-context: the workspace loads from the build context (locked, offline): $members members"
fi
if grep -nE '(CARGO_PROFILE_|--config[= ].*profile)' "$DOCKERFILE" >&2; then
  echo "check-image-context: $DOCKERFILE overrides the release profile (lines above); the image must use [profile.release] of Cargo.toml unchanged" >&2
  failed=yes
fi
[[ "$failed" == no ]]
