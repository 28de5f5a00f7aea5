#!/usr/bin/env bash
# The man pages render without a groff warning (what lintian checks too), and ringcap-record(1)
# documents exactly the options `ringcap record --help` lists: every one of them, and no other.
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

# The option terms of the OPTIONS section as man renders them: "       -a, --all-cpus",
# "       --threads[=N|cpu|core|package|numa]" (indented 7; their text is indented 11).
man_opts=$(LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$mandir/ringcap-record.1.gz" 2>/dev/null | col -bx |
  awk '/^[A-Z]/ { in_opts = ($0 == "OPTIONS") } in_opts && /^       -/' |
  grep -oE '(^ +|, )--?[A-Za-z][A-Za-z-]*' | sed 's/^[ ,]*//' | sort -u)
help_opts=$("$here/help_options.sh" "$ringcap")
echo "ringcap record --help: $(echo "$help_opts" | wc -l) options; ringcap-record(1): $(echo "$man_opts" | wc -l)"
missing=$(comm -23 <(echo "$help_opts") <(echo "$man_opts"))
extra=$(comm -13 <(echo "$help_opts") <(echo "$man_opts"))
if [ -n "$missing" ]; then echo "FAIL: in --help, not in ringcap-record(1): $(echo "$missing" | tr "\n" " ")"; fail=1; fi
if [ -n "$extra" ]; then echo "FAIL: in ringcap-record(1), not in --help: $(echo "$extra" | tr "\n" " ")"; fail=1; fi
[ "$fail" -eq 0 ] && echo "OK"
exit "$fail"
