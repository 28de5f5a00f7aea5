#!/usr/bin/env bash
# Prints the options `ringcap record --help` lists, one per line, sorted: each option line's short
# and long names, and the internal knobs named after "Internal knobs" (left out with --public).
# With --top, the commands and options `ringcap --help` lists instead, the same way.
# Used by man_check.sh and completion_test.sh, so that the man pages and the completion follow --help.
set -euo pipefail
ringcap="$1"
mode="${2:-}"
if [ "$mode" = "--top" ]; then
  "$ringcap" --help | awk '
    /^Commands:/ { sec = "commands"; next }
    /^Options:/ { sec = "options"; next }
    /^[^ ]/ { sec = "" }
    sec == "commands" && /^  [a-z]/ { print $1 }
    sec == "options" && /^  -[A-Za-z]/ { print substr($1, 1, 2) }
    sec == "options" && /^  -[A-Za-z], --[a-z]/ { n = $2; sub(/[^a-z-].*/, "", n); print n }
    sec == "options" && /^      --[a-z]/ { n = $1; sub(/^--/, "", n); sub(/[^a-z-].*/, "", n); print "--" n }
  ' | sort -u
  exit
fi
"$ringcap" record --help | awk -v public="$mode" '
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
