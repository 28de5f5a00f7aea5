#!/usr/bin/env bash
# Prints the options `ringcap record --help` lists, one per line, sorted: each option line's short
# and long names, and the internal knobs named after "Internal knobs" (left out with --public).
# Used by man_check.sh and completion_test.sh, so that the man page and the completion follow --help.
set -euo pipefail
ringcap="$1"
public="${2:-}"
"$ringcap" record --help | awk -v public="$public" '
  /^Internal knobs/ { knobs = 1 }
  /^Without/ { knobs = 0 }
  knobs {
    if (public == "--public") next
    s = $0
    while (match(s, /--[a-z][a-z-]*/)) { print substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH) }
    next
  }
  # "  -a, --all-cpus ...", "  -g ...", "      --call-graph ...": short names at column 3, long
  # names at 7 (continuation lines are indented further).
  /^  -[A-Za-z]/ { print substr($1, 1, 2) }
  /^  -[A-Za-z], --[a-z]/ { n = $2; sub(/[^a-z-].*/, "", n); print n }
  /^      --[a-z]/ { n = $1; sub(/^--/, "", n); sub(/[^a-z-].*/, "", n); print "--" n }
' | sort -u
