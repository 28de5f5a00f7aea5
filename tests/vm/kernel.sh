# shellcheck shell=bash
# Sourced by the QEMU tests (tests/vm/many_cpus.sh, tests/guest/): Debian's cloud kernel, the package
# linux-image-cloud-amd64 points to, downloaded with `apt-get download` into CACHE and unpacked
# there (not installed). guest_kernel CACHE sets KDEB (the .deb), KDIR (its unpacked tree), VMLINUZ
# and KVER, or calls skip (defined by the caller) with the reason.
guest_kernel() {
    local cache=$1 pkg
    KDIR="$cache/kernel"
    if ! ls "$KDIR"/boot/vmlinuz-* >/dev/null 2>&1 || ! ls "$cache"/linux-image-*.deb >/dev/null 2>&1; then
        pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
        [ -n "$pkg" ] || skip "apt-cache knows no linux-image-cloud-amd64 (run apt-get update)"
        (cd "$cache" && rm -f linux-image-*.deb && apt-get download -q "$pkg" >/dev/null 2>&1) ||
            skip "apt-get download $pkg failed (no network or no apt lists)"
        rm -rf "$KDIR" && mkdir -p "$KDIR"
        dpkg-deb -x "$cache/$pkg"_*.deb "$KDIR"
    fi
    local debs=("$cache"/linux-image-*.deb) images=("$KDIR"/boot/vmlinuz-*)
    # shellcheck disable=SC2034  # for the callers
    KDEB=${debs[0]}
    VMLINUZ=${images[0]}
    KVER=${VMLINUZ##*/vmlinuz-}
}

# The virtio modules (PCI transport and block device) in load order, copied (decompressed) into DIR;
# prints their file names. The cloud kernel builds ext4 in, not virtio.
guest_virtio_modules() {
    local dir=$1 m f found moddir="$KDIR/lib/modules/$KVER/kernel/drivers"
    for m in virtio/virtio_ring virtio/virtio virtio/virtio_pci_modern_dev virtio/virtio_pci_legacy_dev \
             virtio/virtio_pci block/virtio_blk; do
        found=("$moddir/$m.ko"*)
        f=${found[0]}
        if [ ! -e "$f" ]; then continue; fi  # built in
        case "$f" in
            *.ko) cp "$f" "$dir/" ;;
            *.ko.xz) xz -dc "$f" >"$dir/$(basename "$f" .xz)" ;;
            *) echo "cannot load $f" >&2; return 1 ;;
        esac
        basename "${f%.xz}"
    done
}
