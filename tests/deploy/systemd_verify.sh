#!/usr/bin/env bash
# systemd-analyze verify on deploy/systemd's units: no error and no warning about them.
# The units name /usr/bin/ringcap, which verify requires to exist; the copies checked here name the
# built binary instead (argument 2), nothing else changes. Also: the service has no [Install]
# section (only the timer starts it), and the timer has one.
# Exit 77 (skipped) without systemd-analyze.
set -u
units="$1" binary="$2"
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze not installed (apt-get install systemd; scripts/bootstrap --tests does)"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for f in "$units"/ringcap-capture.service "$units"/ringcap-capture.timer; do
  sed "s#/usr/bin/ringcap #$binary #" "$f" >"$tmp/$(basename "$f")"
done
out=$(systemd-analyze verify "$tmp/ringcap-capture.service" "$tmp/ringcap-capture.timer" 2>&1)
rc=$?
echo "systemd-analyze verify: exit $rc"
[ -n "$out" ] && echo "$out"
fail=0
[ "$rc" -eq 0 ] || fail=1
if echo "$out" | grep -q 'ringcap-capture'; then echo "FAIL: warnings about our units"; fail=1; fi
if grep -q '^\[Install\]' "$units/ringcap-capture.service"; then
  echo "FAIL: the service can be enabled on its own; only the timer should start it"; fail=1
fi
grep -q '^WantedBy=timers.target' "$units/ringcap-capture.timer" || { echo "FAIL: timer without WantedBy=timers.target"; fail=1; }
grep -q '^ExecStart=/usr/bin/ringcap record ' "$units/ringcap-capture.service" || { echo "FAIL: ExecStart"; fail=1; }
[ "$fail" -eq 0 ] && echo "OK"
exit "$fail"
