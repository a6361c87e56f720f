#!/usr/bin/env bash
# Lists the functions longer than a bound (default 80 lines, signature to closing brace) in the
# reader's and the operator's code, tests left out; exits 1 if there is one.
#
# Why: a long function is where the data path gets hard to follow; the bound keeps each step small
# enough to read at once. A function that must stay longer says why in a comment line starting with
# `// long:` just above its signature, and is then listed as allowed.
#
# How: rustfmt puts a function's closing brace alone on a line at the signature's indentation, so a
# function ends at the first such line. Test code is what sits in `*_tests.rs` files, `tests/` folders
# and after a `#[cfg(test)]` line.
#
# Usage: scripts/long-functions.sh [MAX_LINES] [DIR...]   (default: 80 reader/src operator/src)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

max=80
if [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]]; then max=$1; shift; fi
dirs=("$@")
if [[ ${#dirs[@]} -eq 0 ]]; then dirs=(reader/src operator/src); fi

find "${dirs[@]}" -name '*.rs' ! -name '*_tests.rs' ! -path '*/tests/*' -print0 | sort -z |
  xargs -0 awk -v max="$max" '
    FNR == 1 { open = 0; in_tests = 0; allow_next = 0 }
    /^[[:space:]]*#\[cfg\(test\)\]/ { in_tests = 1 }
    in_tests { next }
    /^[[:space:]]*\/\/ long:/ { allow_next = 1; next }
    !open && /^[[:space:]]*(pub(\([a-z]+\))? )?(const )?(async )?fn [A-Za-z0-9_]+/ {
      match($0, /^[[:space:]]*/); indent = RLENGTH
      name = $0; sub(/^[[:space:]]*/, "", name); sub(/[(<].*/, "", name)
      allowed = allow_next; allow_next = 0
      # One line, or a declaration without a body.
      if ($0 ~ /\}[[:space:]]*$/ || $0 ~ /;[[:space:]]*$/) next
      open = 1; body = ($0 ~ /\{[[:space:]]*$/); start = FNR
      next
    }
    !/^[[:space:]]*(#\[|\/\/|$)/ { allow_next = 0 }
    open && !body && /;[[:space:]]*$/ { open = 0; next }
    open && /\{[[:space:]]*$/ { body = 1 }
    open && /^[[:space:]]*\}[[:space:]]*$/ {
      match($0, /^[[:space:]]*/)
      if (RLENGTH == indent) {
        open = 0; lines = FNR - start + 1
        if (lines > max) {
          printf "%s:%d %s: %d lines%s\n", FILENAME, start, name, lines, (allowed ? " (allowed: // long:)" : "")
          if (!allowed) found = 1
        }
      }
    }
    END { exit found }
  ' || exit 1
