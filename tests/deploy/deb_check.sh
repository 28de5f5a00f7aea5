#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2034,SC2317  # check() and wait_for() eval their single-quoted conditions
# Checks the .deb that scripts/package built, if there is one for this version (it is not built by
# the tests: a Release build takes minutes): its version, Depends (Debian 12's runtime packages of
# liburing, mimalloc, zstd and the C/C++ runtime, from dpkg-shlibdeps), Recommends linux-perf, the
# files (man pages, completion, copyright, changelog among them), and no maintainer scripts (so
# nothing is enabled or started on install).
# RINGCAP_DEB names the file; else SOURCE/build-package/ringcap_VERSION_*.deb. Exit 77 without one.
set -u
src="$1" version="$2"
deb="${RINGCAP_DEB:-}"
if [ -z "$deb" ]; then
  for f in "$src"/build-package/ringcap_"$version"_*.deb; do [ -f "$f" ] && deb="$f"; done
fi
if [ -z "$deb" ] || [ ! -f "$deb" ]; then
  echo "SKIP: no ringcap_${version}_*.deb (scripts/package builds it into build-package/)"
  exit 77
fi
command -v dpkg-deb >/dev/null || { echo "SKIP: dpkg-deb missing"; exit 77; }
echo "$deb"
dpkg-deb -f "$deb" Package Version Depends Recommends
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
depends=$(dpkg-deb -f "$deb" Depends)
check "Version $version" '[ "$(dpkg-deb -f "$deb" Version)" = "$version" ]'
for p in liburing2 libmimalloc2.0 libzstd1 libc6 libstdc++6 libgcc-s1; do
  check "Depends $p" '[[ ", $depends," == *", $p "* ]]'
done
check "Recommends linux-perf" '[ "$(dpkg-deb -f "$deb" Recommends)" = linux-perf ]'
files=$(dpkg-deb -c "$deb" | awk '{print $NF}')
for f in ./usr/bin/ringcap ./usr/share/doc/ringcap/README.md ./usr/share/doc/ringcap/copyright \
         ./usr/share/doc/ringcap/changelog.gz ./usr/share/doc/ringcap/docs/security.md \
         ./usr/share/man/man1/ringcap.1.gz ./usr/share/man/man1/ringcap-record.1.gz \
         ./usr/share/bash-completion/completions/ringcap \
         ./usr/lib/systemd/system/ringcap-capture.service ./usr/lib/systemd/system/ringcap-capture.timer \
         ./usr/share/ringcap/k8s/daemonset.yaml ./usr/share/ringcap/k8s/job.yaml ./usr/share/ringcap/k8s/Dockerfile \
         ./usr/share/ringcap/slurm/prolog.sh ./usr/share/ringcap/slurm/epilog.sh; do
  check "$f" 'grep -qx -- "$f" <<<"$files"'
done
ctl=$(mktemp -d); trap 'rm -rf "$ctl"' EXIT
dpkg-deb -e "$deb" "$ctl"
dpkg-deb -x "$deb" "$ctl/root"
doc="$ctl/root/usr/share/doc/ringcap"
check "copyright: Debian's machine-readable format, MIT (Expat)" \
  'head -1 "$doc/copyright" | grep -q "^Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/" && grep -qx "License: Expat" "$doc/copyright"'
check "changelog.gz: its newest entry is version $version" \
  '[ "$(zcat "$doc/changelog.gz" | dpkg-parsechangelog -l- -S Version)" = "$version" ]'
check "the README's and the guides' links name files the package installs" '"$(dirname "$0")/../docs/doc_links.sh" "$doc"'
check "no maintainer scripts (nothing enabled on install)" '! ls "$ctl" | grep -Eq "^(preinst|postinst|prerm|postrm)$"'
[ "$fail" -eq 0 ] && echo "OK"
exit "$fail"
