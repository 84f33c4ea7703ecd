# arm64.sh: what build-image.sh does differently for ARCH=arm64 (sourced).
# A file of its own so that tuning the arm64 build does not change the
# amd64 image's cache key (cached.sh keys arm64 on both files).
#
# mmdebstrap runs the arm64 packages' maintainer scripts under qemu-user;
# every emulated process start and every emulated compile is slow (the
# first builds took 50–70 min on a 2-core host). So the work that is the
# same on any architecture is done natively, and what no test needs is
# left out:
# - update-ca-certificates (a shell script: openssl under emulation once
#   per certificate; it ran twice, 104 s and 91 s beside an e2e run, 8 min
#   once at nice 19; natively 1 s) is diverted while
#   the packages install, then the image's own script runs with the host's
#   shell and openssl on the image's files (bound over the host's paths in
#   a mount namespace of its own);
# - py3compile (run by each Python package) is diverted to a no-op while
#   the packages install; the host's Python (3.11, as bookworm's: the
#   bytecode is the same on every architecture) compiles dist-packages
#   after, hash-checked so the mtime clamp does not make it stale;
# - update-initramfs is diverted while the packages install and run once,
#   with the modules a virt machine's disk needs listed (MODULES=most under
#   emulation took ~12 min each time);
# - kernel modules no QEMU virt machine or test uses (GPU, media, sound,
#   wireless, staging, InfiniBand, IIO, Bluetooth) are not unpacked: less
#   to unpack, depmod and write at every install.
# No encrypted installs on arm64 (yet): no TPM or LUKS tools.

PACKAGES=(linux-image-arm64 initramfs-tools zstd systemd-sysv udev cloud-init cloud-guest-utils
          ifupdown isc-dhcp-client iproute2 python3 ca-certificates e2fsprogs)

ARM64_INITRAMFS_MODULES=(virtio_pci virtio_mmio virtio_blk ext4 crc32c_generic)

# arm64_early EARLY_DIR: files synced into the tree before the packages.
arm64_early() {
  printf 'MODULES=list\nCOMPRESS=zstd\nFSTYPE=ext4\n' > "$1/etc/initramfs-tools/conf.d/e2e-image.conf"
  mkdir -p "$1/usr/share/initramfs-tools/modules.d"
  printf '%s\n' "${ARM64_INITRAMFS_MODULES[@]}" > "$1/usr/share/initramfs-tools/modules.d/e2e-image"
}

# divert_hooks PATH...: mmdebstrap options that divert each PATH to a
# no-op while the packages install, and put the real one back after.
divert_hooks() {
  local p
  for p in "$@"; do
    printf '%s\n' \
      "--essential-hook=chroot \"\$1\" dpkg-divert --quiet --local --rename --divert $p.e2e --add $p" \
      "--essential-hook=printf '#!/bin/sh\nexit 0\n' > \"\$1$p\" && chmod 755 \"\$1$p\"" \
      "--customize-hook=rm \"\$1$p\" && chroot \"\$1\" dpkg-divert --quiet --local --rename --remove $p"
  done
}

mapfile -t ARCH_OPTS < <(divert_hooks /usr/sbin/update-initramfs /usr/bin/py3compile /usr/sbin/update-ca-certificates)
# --verbose: apt's and dpkg's lines, each timed by build-image.sh, show
# where an emulated build's time goes.
ARCH_OPTS=(--architectures=arm64 --verbose "${ARCH_OPTS[@]}"
  --customize-hook='chroot "$1" update-initramfs -c -k all')
for d in gpu media sound net/wireless staging infiniband iio bluetooth; do
  ARCH_OPTS+=("--dpkgopt=path-exclude=/lib/modules/*/kernel/drivers/$d/*")
done
ARCH_OPTS+=('--dpkgopt=path-exclude=/lib/modules/*/kernel/sound/*'
            '--dpkgopt=path-exclude=/lib/modules/*/kernel/net/bluetooth/*'
            '--dpkgopt=path-exclude=/lib/modules/*/kernel/net/wireless/*'
            '--dpkgopt=path-exclude=/lib/modules/*/kernel/net/mac80211/*')

# arm64_native ROOTFS: the architecture-independent work, natively.
arm64_native() {
  local py p
  log "update-ca-certificates: the image's script, the host's shell and openssl"
  for p in /etc/ssl/certs /usr/share/ca-certificates /usr/local/share/ca-certificates /etc/ca-certificates; do
    mkdir -p "$1$p"
    [ -d "$p" ] || die "the host has no $p to bind the image's over"
  done
  [ -f /etc/ca-certificates.conf ] || die "the host has no /etc/ca-certificates.conf to bind the image's over"
  command -v openssl >/dev/null || die "the host has no openssl"
  R="$1" unshare --mount --propagation private sh -ec '
    for p in /etc/ssl/certs /usr/share/ca-certificates /usr/local/share/ca-certificates /etc/ca-certificates /etc/ca-certificates.conf; do
      mount --bind "$R$p" "$p"
    done
    sh "$R/usr/sbin/update-ca-certificates" --fresh' >&2 || die "update-ca-certificates failed"
  [ -s "$1/etc/ssl/certs/ca-certificates.crt" ] || die "no /etc/ssl/certs/ca-certificates.crt in the image"
  py=$(cd "$1/usr/bin" && ls python3.[0-9]* 2>/dev/null | grep -E '^python3\.[0-9]+$' | head -n1)
  if [ -n "$py" ] && command -v "$py" >/dev/null; then
    log "byte-compiling dist-packages with the host's $py"
    "$py" -m compileall -q -j0 --invalidation-mode checked-hash -s "$1" -p / \
      "$1/usr/lib/python3/dist-packages" >&2 || die "compileall failed"
  else
    log "the host has no ${py:-python3.x} as the image's: dist-packages compiled under emulation"
    chroot "$1" sh -c 'for p in $(dpkg-query -W -f "\${Package}\n" "python3-*"); do py3compile -p "$p"; done' >&2
  fi
}
