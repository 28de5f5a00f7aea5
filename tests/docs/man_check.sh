#!/usr/bin/env bash
# The man pages render without a groff warning (what lintian checks too), ringcap-record(1)
# documents exactly the options `ringcap record --help` lists (every one of them, and no other),
# ringcap(1) exactly the commands and options of `ringcap --help`, and both the same environment.
#   man_check.sh RINGCAP MANDIR      (MANDIR holds ringcap.1.gz and ringcap-record.1.gz)
# Exit 77 (skipped) without man (man-db; scripts/bootstrap --tests installs it).
set -u
ringcap="$1" mandir="$2"
here=$(dirname "$0")
command -v man >/dev/null || { echo "SKIP: man not installed (apt-get install man-db)"; exit 77; }
fail=0
for page in ringcap.1.gz ringcap-record.1.gz; do
  [ -f "$mandir/$page" ] || { echo "FAIL: $mandir/$page was not built"; exit 1; }
  warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$mandir/$page" 2>&1 >/dev/null)
  if [ -n "$warnings" ]; then echo "FAIL: man --warnings $page:"; echo "$warnings"; fail=1; fi
  lines=$(LC_ALL=C.UTF-8 MANWIDTH=80 man -l "$mandir/$page" 2>/dev/null | wc -l)
  echo "$page: $lines lines rendered"
  [ "$lines" -gt 20 ] || { echo "FAIL: $page renders $lines lines"; fail=1; }
done

# The terms of a page's SECTIONS (an awk regex) as man renders them, indented 7 (their text is
# indented 11): the names of options ("       -a, --all-cpus", "       --threads[=N|cpu|...]"), and
# terms of one word ("       record", "       HOME").
terms() {  # PAGE SECTIONS
  local text
  text=$(LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$mandir/$1" 2>/dev/null | col -bx |
    awk -v want="^($2)\$" '/^[A-Z]/ { in_sec = ($0 ~ want) } in_sec && /^       [^ ]/')
  { grep -E '^ +-' <<<"$text" | grep -oE '(^ +|, )--?[A-Za-z][A-Za-z-]*' | sed 's/^[ ,]*//'
    grep -E '^ +[A-Za-z_]+ *$' <<<"$text" | tr -d ' '; } | sort -u
}
# Both ways: every term of the help in the page, and no other.
compare() {  # WHAT_HELP HELP_TERMS WHAT_PAGE PAGE_TERMS
  echo "$1: $(echo "$2" | wc -l) terms; $3: $(echo "$4" | wc -l)"
  local missing extra
  missing=$(comm -23 <(echo "$2") <(echo "$4"))
  extra=$(comm -13 <(echo "$2") <(echo "$4"))
  if [ -n "$missing" ]; then echo "FAIL: in $1, not in $3: $(echo "$missing" | tr "\n" " ")"; fail=1; fi
  if [ -n "$extra" ]; then echo "FAIL: in $3, not in $1: $(echo "$extra" | tr "\n" " ")"; fail=1; fi
}
compare "ringcap record --help" "$("$here/help_options.sh" "$ringcap")" \
        "ringcap-record(1) OPTIONS" "$(terms ringcap-record.1.gz OPTIONS)"
# ringcap(1): its commands and options, against `ringcap --help`'s.
compare "ringcap --help" "$("$here/help_options.sh" "$ringcap" --top)" \
        "ringcap(1) COMMANDS and OPTIONS" "$(terms ringcap.1.gz 'COMMANDS|OPTIONS')"
# Both pages name the same environment variables (ringcap(1) repeats ringcap-record(1)'s).
compare "ringcap-record(1) ENVIRONMENT" "$(terms ringcap-record.1.gz ENVIRONMENT)" \
        "ringcap(1) ENVIRONMENT" "$(terms ringcap.1.gz ENVIRONMENT)"
[ -n "$(terms ringcap.1.gz ENVIRONMENT)" ] || { echo "FAIL: ringcap(1) has no ENVIRONMENT section"; fail=1; }
[ "$fail" -eq 0 ] && echo "OK"
exit "$fail"
