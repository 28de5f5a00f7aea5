#!/usr/bin/env bash
# The batch-job recipes on a real Debian 12 node: boots the guest that tests/guest/image.sh builds
# (systemd as init, pure cgroup2, Slurm 22.05 from Debian) under QEMU (TCG, 2 vCPUs), installs
# ringcap's .deb there as a site would, configures Slurm as docs/batch-jobs.md says, runs real jobs
# (sbatch, srun) and the systemd timer's service (tests/guest/guest.sh, in the guest), then checks
# every capture with the host's perf (tests/guest/check.sh).
#
#   tests/guest/run.sh [DEB] [WORK_DIR]      (DEB defaults to $RINGCAP_DEB)
#
# WORK_DIR (default build/guest) gets the console log and the guest's results; the kernel and the
# image are cached in WORK_DIR/../vm/cache (shared with tests/vm/many_cpus.sh). Needs root,
# qemu-system-x86, busybox-static, debootstrap, e2fsprogs, linux-perf, python3 and apt access to
# Debian's mirror (scripts/bootstrap --tests installs them). Without one of them, or without a .deb,
# it exits 77 (ctest: skipped) with the reason, unless RINGCAP_VM_REQUIRED=1 (CI): then it fails.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DEB=${1:-${RINGCAP_DEB:-}}
WORK=${2:-$SRC/build/guest}
mkdir -p "$WORK"
WORK=$(readlink -f "$WORK")
TIMEOUT_S=${RINGCAP_GUEST_TIMEOUT:-1500}

skip() {
    echo "guest: SKIPPED: $*" >&2
    if [ "${RINGCAP_VM_REQUIRED:-0}" = 1 ]; then exit 1; fi
    exit 77
}
fail() { echo "guest: FAILED: $*" >&2; exit 1; }

if [ -z "$DEB" ] || [ ! -f "$DEB" ]; then skip "no ringcap .deb (scripts/package builds one; pass it or set RINGCAP_DEB)"; fi
DEB=$(readlink -f "$DEB")
[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap builds the guest's root)"
QEMU=$(command -v qemu-system-x86_64 || true)
[ -n "$QEMU" ] || skip "qemu-system-x86_64 not found (apt-get install qemu-system-x86, or scripts/bootstrap --tests)"
command -v perf >/dev/null || skip "perf not found (apt-get install linux-perf)"
command -v python3 >/dev/null || skip "python3 not found"
command -v cpio >/dev/null || skip "cpio not found (apt-get install cpio)"
BUSYBOX=/bin/busybox
if [ ! -x "$BUSYBOX" ] || ldd "$BUSYBOX" >/dev/null 2>&1; then
    skip "$BUSYBOX is missing or not static (apt-get install busybox-static)"
fi

mkdir -p "$WORK" "$WORK/../vm/cache"
CACHE=$(readlink -f "$WORK/../vm/cache")
t_start=$(date +%s)
set +e
"$SRC/tests/guest/image.sh" "$CACHE" >"$WORK/image.log" 2>&1
rc=$?
set -e
grep '^image:' "$WORK/image.log" || true
[ "$rc" -eq 0 ] || skip "no guest image (image.sh exit $rc; see $WORK/image.log)"
IMG=$(tail -1 "$WORK/image.log")
t_image=$(date +%s)

# shellcheck source=tests/vm/kernel.sh
. "$SRC/tests/vm/kernel.sh"
guest_kernel "$CACHE"

# The initramfs: busybox and the virtio modules, enough to mount the root disk (ext4 is built in)
# and hand over to systemd.
INITRD="$WORK/initrd"
rm -rf "$INITRD" && mkdir -p "$INITRD"/{bin,dev,proc,sys,modules,newroot}
cp "$BUSYBOX" "$INITRD/bin/busybox"
MODS=$(guest_virtio_modules "$INITRD/modules" | tr '\n' ' ') || fail "cannot copy the virtio modules"
cat >"$INITRD/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $MODS; do insmod /modules/\$m || echo "initrd: insmod \$m failed"; done
i=0
while [ ! -b /dev/vda ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i + 1)); done
mount -t ext4 -o rw /dev/vda /newroot || { echo "initrd: cannot mount /dev/vda"; poweroff -f; }
umount /proc /sys /dev
exec switch_root /newroot /sbin/init
EOF
chmod +x "$INITRD/init"
(cd "$INITRD" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd.gz"

# The payload (second disk, a tar archive): the test, the .deb and the documentation whose
# configuration the test installs.
PAY="$WORK/payload"
rm -rf "$PAY" && mkdir -p "$PAY/docs"
cp "$SRC/tests/guest/guest.sh" "$PAY/run"
cp "$SRC/tests/guest/guest_slurm.sh" "$SRC/tests/guest/guest_systemd.sh" "$PAY/"
cp "$SRC/docs/batch-jobs.md" "$PAY/docs/"
cp "$DEB" "$PAY/ringcap.deb"
# RINGCAP_GUEST_SHELL=1: a root shell on the guest's second serial port, the socket WORK/shell.sock
# (for debugging: `socat - UNIX-CONNECT:WORK/shell.sock`).
shell=()
if [ -n "${RINGCAP_GUEST_SHELL:-}" ]; then
    touch "$PAY/debug-shell"
    shell=(-serial "unix:$WORK/shell.sock,server=on,wait=off")
fi
tar -cf "$WORK/payload.tar" -C "$PAY" .
rm -f "$WORK/out.img" && truncate -s 1G "$WORK/out.img"
rm -rf "$WORK/out"

echo "guest: booting Debian 12 ($KVER, systemd, 2 vCPUs, TCG) with $(basename "$DEB")"
t_boot=$(date +%s)
set +e
timeout "$TIMEOUT_S" "$QEMU" -accel tcg,thread=multi -smp 2 -m 2048 \
    -kernel "$VMLINUZ" -initrd "$WORK/initrd.gz" \
    -append "console=ttyS0 rdinit=/init panic=-1 quiet loglevel=3 systemd.show_status=false" \
    -drive file="$IMG",format=raw,if=virtio,snapshot=on,cache=unsafe \
    -drive file="$WORK/payload.tar",format=raw,if=virtio,readonly=on \
    -drive file="$WORK/out.img",format=raw,if=virtio,cache=unsafe \
    -display none -nodefaults -nic none -monitor none -serial stdio "${shell[@]}" -no-reboot </dev/null >"$WORK/console.log" 2>&1
rc=$?
set -e
t_end=$(date +%s)
grep -a -E '^(guest|guest-run|ok|FAIL)' "$WORK/console.log" | tr -d '\r' || true
echo "guest: image $((t_image - t_start)) s, guest ran $((t_end - t_boot)) s (qemu exit $rc)"
[ "$rc" -eq 0 ] || fail "qemu failed or timed out after $((t_end - t_boot)) s; see $WORK/console.log"
tar -xf "$WORK/out.img" -C "$WORK" 2>/dev/null || fail "no results on the output disk; see $WORK/console.log"
python3 "$SRC/tests/guest/check.py" "$WORK/out"
