#!/usr/bin/env bash
# bash -n and shellcheck on the Slurm prolog/epilog, the packaging scripts, the bash completion, the
# shell tests and the QEMU guests' scripts.
# Exit 77 (skipped) without shellcheck, after bash -n.
set -u
src="$1"
files=("$src/deploy/slurm/prolog.sh" "$src/deploy/slurm/epilog.sh" "$src/scripts/package" "$src/scripts/test-package" "$src/scripts/test-fresh"
       "$src/tests/deploy/systemd_verify.sh" "$src/tests/deploy/shell_lint.sh" "$src/tests/deploy/slurm_test.sh"
       "$src/tests/deploy/deb_check.sh" "$src/bench/idle.sh" "$src/bench/flight.sh" "$src/bench/median.sh" "$src/completion/ringcap.bash"
       "$src/tests/docs/help_options.sh" "$src/tests/docs/man_check.sh" "$src/tests/docs/completion_test.sh"
       "$src/tests/docs/doc_links.sh"
       "$src/tests/vm/kernel.sh" "$src/tests/guest/run.sh" "$src/tests/guest/image.sh" "$src/tests/guest/guest.sh"
       "$src/tests/guest/guest_slurm.sh" "$src/tests/guest/guest_systemd.sh")
fail=0
for f in "${files[@]}"; do bash -n "$f" || { echo "FAIL: bash -n $f"; fail=1; }; done
[ "$fail" -eq 0 ] || exit 1
echo "bash -n: ${#files[@]} files OK"
if ! command -v shellcheck >/dev/null; then
  echo "SKIP: shellcheck not installed (apt-get install shellcheck; scripts/bootstrap --tests does)"
  exit 77
fi
# The scripts name what they source relative to the source tree (# shellcheck source=tests/...).
cd "$src" || exit 1
shellcheck "${files[@]}" || exit 1
echo "shellcheck: OK"
