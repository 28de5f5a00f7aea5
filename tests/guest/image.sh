#!/usr/bin/env bash
# The Debian 12 node the guest tests boot (tests/guest/run.sh): a root filesystem debootstrapped
# from Debian's packages (systemd as init, dbus, munge, slurmctld, slurmd, slurm-client, and the
# libraries ringcap's .deb depends on), the cloud kernel's modules (the same kernel
# tests/vm/many_cpus.sh boots), in an ext4 image made with `mkfs.ext4 -d` (no loop mount).
#
#   tests/guest/image.sh CACHE_DIR     prints the image's path on its last line
#
# The image is cached in CACHE_DIR under a name that changes with this script and the kernel's
# version; the tests boot it with snapshot=on, so it stays as built. It holds nothing of ringcap:
# the .deb, the recipes and the test come on a second disk, read at boot by guest-run.service
# (below), which runs the payload's `run` and powers the guest off. Needs root, debootstrap,
# mkfs.ext4 (e2fsprogs) and apt access to Debian's mirror (MIRROR). Exit 77 with the reason when
# something is missing (run.sh decides whether that fails).
set -euo pipefail
CACHE=$(readlink -f "${1:?usage: image.sh CACHE_DIR}")
MIRROR=${MIRROR:-http://deb.debian.org/debian}
skip() { echo "image: $*" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null || skip "debootstrap not found (apt-get install debootstrap; scripts/bootstrap --tests)"
command -v mkfs.ext4 >/dev/null || skip "mkfs.ext4 not found (apt-get install e2fsprogs)"
mkdir -p "$CACHE"

# shellcheck source=tests/vm/kernel.sh
. "$(dirname "$0")/../vm/kernel.sh"
guest_kernel "$CACHE"

# Only what the tests use: systemd (init, journald, logger's syslog), dbus (systemd's bus, which
# slurmd's cgroup/v2 plugin asks for its scope), kmod (module loading), procps (ps, pgrep), iproute2
# (ip, for the node's address), Slurm,
# and the libraries of ringcap's Depends, so that the .deb installs offline.
PKGS=systemd,systemd-sysv,dbus,kmod,procps,iproute2,munge,slurmctld,slurmd,slurm-client,liburing2,libmimalloc2.0,libzstd1
key=$({ cat "$0"; echo "$KVER $PKGS"; } | sha256sum | cut -c1-12)
IMG="$CACHE/debian12-$key.img"
if [ -f "$IMG" ]; then
    echo "image: cached $IMG"
    echo "$IMG"
    exit 0
fi

ROOT="$CACHE/root.tmp"
rm -rf --one-file-system "$ROOT" "$CACHE"/debian12-*.img  # older images are of no use now
start=$(date +%s)
echo "image: debootstrap --variant=minbase bookworm ($PKGS)"
debootstrap --variant=minbase --include="$PKGS" bookworm "$ROOT" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
    { tail -20 "$CACHE/debootstrap.log" >&2; skip "debootstrap failed (no network?); log in $CACHE/debootstrap.log"; }
echo "image: debootstrap took $(($(date +%s) - start)) s"

# The kernel's modules, as its package installs them (without the package: its Depends want an
# initramfs generator; the guest boots from the small initramfs run.sh makes).
# (Copied from the unpacked tree: unpacking the .deb over the root would replace its /lib symlink.)
mkdir -p "$ROOT/usr/lib/modules"
cp -a "$KDIR/lib/modules/$KVER" "$ROOT/usr/lib/modules/"
cp -a "$KDIR/boot/." "$ROOT/boot/"
chroot "$ROOT" depmod "$KVER"

echo node1 >"$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n10.0.2.15 node1\n' >"$ROOT/etc/hosts"
# The root is mounted read-write by the initramfs; no fstab entry (no udev: a device unit for it
# would never appear).
echo '# the root is mounted by the initramfs' >"$ROOT/etc/fstab"
# Nothing that only costs boot time in a throwaway guest.
chroot "$ROOT" systemctl mask -q apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
    e2scrub_all.timer e2scrub_reap.service fstrim.timer serial-getty@ttyS0.service getty@tty1.service \
    systemd-timesyncd.service systemd-networkd.service systemd-networkd-wait-online.service \
    console-getty.service
chroot "$ROOT" systemctl set-default -q multi-user.target
# A network address, as any node has: the guest has no network card, and without an address other
# than the loopback's, getaddrinfo(AI_ADDRCONFIG) finds none, so slurmd cannot bind its port. A
# dummy interface gets one (by `ip`: systemd-networkd would wait for udev, which is not here).
cat >"$ROOT/etc/systemd/system/dummy-net.service" <<'EOF'
[Unit]
Description=A dummy network interface with the node's address
Before=network.target
Wants=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/ip link add dummy0 type dummy
ExecStart=/usr/sbin/ip addr add 10.0.2.15/24 dev dummy0
ExecStart=/usr/sbin/ip link set dummy0 up

[Install]
WantedBy=multi-user.target
EOF
chroot "$ROOT" systemctl enable -q dummy-net.service
mkdir -p "$ROOT/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' >"$ROOT/etc/systemd/journald.conf.d/guest.conf"
# Slurm's daemons start once the test has written their configuration.
chroot "$ROOT" systemctl disable -q slurmctld.service slurmd.service

# The payload runner: the second disk (vdb) is a tar archive holding `run`; its output goes to the
# third (vdc). The guest powers off when it ends, whatever happened.
cat >"$ROOT/usr/local/sbin/guest-run" <<'EOF'
#!/bin/sh
mkdir -p /run/payload
if tar -xf /dev/vdb -C /run/payload; then
    /run/payload/run /dev/vdc
    echo "guest-run: exit status $?"
else
    echo "guest-run: no payload on /dev/vdb"
fi
systemctl poweroff --no-block
EOF
chmod 755 "$ROOT/usr/local/sbin/guest-run"
cat >"$ROOT/etc/systemd/system/guest-run.service" <<'EOF'
[Unit]
Description=Run the test payload from /dev/vdb
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/guest-run
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF
chroot "$ROOT" systemctl enable -q guest-run.service
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*

size_mb=$(( $(du -sm "$ROOT" | cut -f1) + 768 ))  # room for the tests' files
mkfs.ext4 -q -F -L guestroot -d "$ROOT" "$IMG.tmp" "${size_mb}M"
mv "$IMG.tmp" "$IMG"
rm -rf --one-file-system "$ROOT"
echo "image: built in $(($(date +%s) - start)) s, ${size_mb} MB"
echo "$IMG"
