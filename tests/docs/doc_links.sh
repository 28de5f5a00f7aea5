#!/usr/bin/env bash
# Every relative link in the Markdown files given (a directory: every *.md under it) names a file
# that is there: in the source tree, and in the documentation as installed (/usr/share/doc/ringcap,
# where the man pages' sources and LICENSE are not; cmake/InstalledDocs.cmake). Anchors are not
# checked, only files.
#   doc_links.sh FILE|DIR...          these files
#   doc_links.sh --installed BUILD    BUILD installed (cmake --install) into a temporary prefix
set -u
if [ "${1:-}" = "--installed" ]; then
  stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
  cmake --install "$2" --prefix "$stage" >/dev/null || { echo "FAIL: cmake --install $2"; exit 1; }
  set -- "$stage/share/doc/ringcap"
fi
fail=0 links=0
while IFS= read -r md; do
  while IFS= read -r target; do
    case "$target" in http://* | https://* | mailto:* | '#'*) continue ;; esac
    links=$((links + 1))
    [ -e "$(dirname "$md")/${target%%#*}" ] || { echo "FAIL: $md: ($target) is not there"; fail=1; }
  done < <(grep -oE '\]\([^) ]+\)' "$md" | sed 's/^](//; s/)$//')
done < <(find "$@" -name '*.md' | sort)
echo "$links relative links checked in $(find "$@" -name '*.md' | wc -l) files"
[ "$fail" -eq 0 ] && echo "OK"
exit "$fail"
