#!/usr/bin/env bash
# shellcheck disable=SC2034  # COMP_* are read by the completion functions
# Sources bash-completion and completion/ringcap.bash in this bash, asks for completions as bash
# would on TAB, and checks the answers: the options (exactly the public ones `ringcap record --help`
# lists), -e from the events ringcap accepts (named events as in src/events/event_spec.cpp, and
# tracefs's tracepoints when it can be read), -o files, option values, the command after --.
#   completion_test.sh SOURCE RINGCAP [COMPLETION_FILE]
# Exit 77 (skipped) without bash-completion (scripts/bootstrap --tests installs it).
set -u
src="$1" ringcap="$2" file="${3:-$1/completion/ringcap.bash}"
bc=/usr/share/bash-completion/bash_completion
[ -r "$bc" ] || { echo "SKIP: bash-completion not installed (apt-get install bash-completion)"; exit 77; }
# bash_completion reads the interactive settings it would have; it is sourced as in a login shell.
# shellcheck source=/dev/null
. "$bc"
# shellcheck source=/dev/null
. "$file"
PATH="$(dirname "$ringcap"):$PATH"  # so that the completion for a recorded command finds commands
fail=0

# COMP_WORDS as bash makes them for LINE (the cursor at its end): words split at blanks, and the
# characters of COMP_WORDBREAKS that matter here ('=' and ':') words of their own.
complete_line() {
  local line="$1" word="" c i
  COMP_WORDS=()
  for ((i = 0; i < ${#line}; i++)); do
    c=${line:i:1}
    if [[ $c == " " ]]; then
      [[ -n $word ]] && COMP_WORDS+=("$word"); word=""
    elif [[ $c == "=" || $c == ":" ]]; then
      [[ -n $word ]] && COMP_WORDS+=("$word"); COMP_WORDS+=("$c"); word=""
    else
      word+=$c
    fi
  done
  COMP_WORDS+=("$word")  # the word being completed ("" after a blank)
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMP_LINE=$line
  COMP_POINT=${#line}
  COMPREPLY=()
  # compopt only works under a real completion: its complaint is left out.
  _ringcap ringcap "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}" \
    2> >(grep -v 'compopt: not currently executing completion function' >&2)
  # Unique: bash lists a command found twice in PATH (/bin and /usr/bin) once.
  printf '%s\n' "${COMPREPLY[@]}" | sort -u
}

expect() {  # LINE EXPECTED (the completions, sorted, one per line)
  local got
  got=$(complete_line "$1")
  if [[ $got == "$2" ]]; then echo "ok: '$1' -> $(echo "$got" | tr '\n' ' ')"
  else echo "FAIL: '$1'"; echo "  expected: $(echo "$2" | tr '\n' ' ')"; echo "  got:      $(echo "$got" | tr '\n' ' ')"; fail=1
  fi
}

expect "ringcap " $'--help\n--version\nrecord'
expect "ringcap rec" "record"
expect "ringcap record --sw" $'--switch-max-files\n--switch-output'
expect "ringcap record --no-b" $'--no-buildid\n--no-buildid-cache'
expect "ringcap record -e cpu-cl" "cpu-clock"
expect "ringcap record --event cpu-clock,task-c" "cpu-clock,task-clock"
expect "ringcap record -a --call-graph d" $'dwarf\ndwarf,'
expect "ringcap record --backend " $'epoll\nuring'
expect "ringcap record --threads=n" "numa"
expect "ringcap record --switch-output=s" "signal"
expect "ringcap record -F m" "max"
expect "ringcap record -a -- truncat" "truncate"
expect "ringcap record -a truncat" "truncate"
expect "ringcap record -a -- ls --almost-al" "--almost-all"  # ls's own completion

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
touch "$tmp/run1.data" "$tmp/run2.data" "$tmp/other"
expect "ringcap record -a -o $tmp/ru" $"$tmp/run1.data"$'\n'"$tmp/run2.data"

# Every public option of --help, and no other.
help_opts=$("$src/tests/docs/help_options.sh" "$ringcap" --public)
expect "ringcap record -" "$help_opts"

# -e: every named event ringcap accepts (its table in event_spec.cpp), and nothing else.
events=$(grep -oE '^    \{"[a-z-]+", PERF_TYPE_(SOFTWARE|HARDWARE)' "$src/src/events/event_spec.cpp" | cut -d'"' -f2 | sort)
[ "$(echo "$events" | wc -l)" -gt 20 ] || { echo "FAIL: no event table in event_spec.cpp"; fail=1; }
named=$(complete_line "ringcap record -e " | grep -v ':')
if [[ $named == "$events" ]]; then echo "ok: -e offers the $(echo "$events" | wc -l) named events of event_spec.cpp"
else echo "FAIL: -e offers:"; diff <(echo "$events") <(echo "$named"); fail=1; fi

# Tracepoints, as system:event (bash shows the part after the last ':' it split at).
if [ -r /sys/kernel/tracing/available_events ] && grep -q '^sched:sched_switch$' /sys/kernel/tracing/available_events; then
  expect "ringcap record -e sched:sched_swi" "sched_switch"
  expect "ringcap record -e cpu-clock,sched:sched_swi" "sched_switch"
else
  echo "note: tracefs not readable here (not root, or not mounted): tracepoint completion not checked"
fi

[ "$fail" -eq 0 ] && echo "OK"
exit "$fail"
