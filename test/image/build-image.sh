#!/bin/bash
# build-image.sh OUT_DIR
#
# Builds a small bootable Debian 12 (bookworm) amd64 GPT disk image from
# Debian packages only, for end-to-end tests of the provisioning tool
# (ARCH=arm64: the same for 64-bit ARM, see below):
#
#   OUT_DIR/debian.raw     sparse raw GPT disk image (~1070 MiB, ~750 MiB allocated)
#   OUT_DIR/debian.raw.gz  the same, gzip -1
#   OUT_DIR/packages.txt   installed packages (name version), for debugging
#   OUT_DIR/build-info.txt layout, sizes, timings, sha256
#
# The image boots from the disk alone under legacy BIOS (SeaBIOS: gptmbr.bin
# + syslinux on the ESP) and UEFI (OVMF: Debian's shim, signed by
# Microsoft's UEFI CA, at the removable path \EFI\BOOT\BOOTX64.EFI, then
# Debian's signed GRUB: it boots with Secure Boot on, the kernel checked
# against Debian's key). Both load the same /vmlinuz and /initrd.img from
# the ESP. Serial console on ttyS0 (115200 8n1) with a getty.
#
# It can be installed encrypted (a profile's encryption, image.unlock:
# clevis): cryptsetup-initramfs and clevis-initramfs are in its initramfs,
# which unlocks a LUKS2 root named by cryptopts= on the kernel command line
# (the provisioning agent sets it in the ESP's boot loader files) with the
# TPM (Clevis's tpm2 pin), or asks for the recovery key on the console.
# Without cryptopts= they do nothing. The kernel and initrd live on the ESP,
# outside the encrypted root.
#
# cloud-init uses NoCloud from /var/lib/cloud/seed/nocloud/ on the root fs
# (written by the provisioning agent after it wrote the image); the image
# ships without a seed (datasource_list: [ NoCloud, None ]).
#
# ARCH=arm64 builds it for 64-bit ARM UEFI machines (QEMU's virt with
# AAVMF): mmdebstrap runs the arm64 packages' scripts under qemu-user
# (binfmt_misc; host packages qemu-user-static, binfmt-support, arch-test);
# Debian's signed shimaa64 at \EFI\BOOT\BOOTAA64.EFI, then grubaa64 (Secure
# Boot possible with the Microsoft keys); root partition type Linux root
# arm64; console ttyAMA0 (PL011); no BIOS boot, no encryption tools.
# arm64.sh has what differs, and why (what runs natively, what is left out).
#
# Partition layout (512-byte sectors; fixed GUIDs so the output is stable):
#   p1  ESP   start 2048, FAT, type EFI System, attr LegacyBIOSBootable
#   p2  root  ext4 (label "root"), type Linux root x86-64, last partition
#             so cloud-init growpart can grow it to fill a bigger disk.
#   Kernel cmdline uses root=PARTUUID=<p2 uuid>.
#
# No loop devices, no mounts: the root fs is made with `mkfs.ext4 -d`, the
# ESP with mkfs.vfat + mtools, syslinux is installed with its mtools-based
# installer, and the pieces are put together with sfdisk + dd on a file.
#
# Needs root (mmdebstrap in root mode, files owned by root in the image).
# Host packages (installed with apt-get if missing): mmdebstrap mtools
# dosfstools syslinux syslinux-common shim-signed grub-efi-amd64-signed e2fsprogs (mkfs.ext4,
# debugfs, e2fsck) fdisk gzip. The output also depends on the mirror content.
#
# Environment knobs (all optional):
#   ARCH                   amd64 (default) or arm64
#   SOURCE_DATE_EPOCH      timestamp for all files/filesystems (default below)
#   DEBIAN_MIRROR          default http://deb.debian.org/debian
#   DEBIAN_SECURITY_MIRROR default http://deb.debian.org/debian-security
#   EXTRA_PACKAGES         comma-separated extra packages (e.g. openssh-server)
#   ROOT_FREE_MB           free space left in the root fs (default 256)
#   IMG_KEEP_WORK=1        keep the work directory (rootfs, partition images)
set -euo pipefail

OUT_DIR=${1:?usage: $0 OUT_DIR}

# ---------------------------------------------------------------- settings
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1747699200}   # 2025-05-20 UTC
SUITE=bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
ROOT_FREE_MB=${ROOT_FREE_MB:-256}
ESP_MB=64                       # holds vmlinuz (~8 MB) + initrd (~31 MB) + bootloaders

# Fixed identifiers (reproducibility; also lets tests find partitions).
DISK_GUID=5d3f0c64-1c1e-4b7a-9d2e-7e2a0f1b0001
ESP_PARTUUID=5d3f0c64-1c1e-4b7a-9d2e-7e2a0f1b00e1
ROOT_PARTUUID=5d3f0c64-1c1e-4b7a-9d2e-7e2a0f1b0002
ROOT_FS_UUID=5d3f0c64-1c1e-4b7a-9d2e-7e2a0f1b0f52
ESP_VOLID=5D3F00E1
ROOT_LABEL=root
ESP_LABEL=ESP
TYPE_ESP=C12A7328-F81F-11D2-BA4B-00A0C93EC93B
TYPE_ROOT_X86_64=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709
TYPE_ROOT_ARM64=B921B045-1DF0-41C3-AF44-4C6F280D3FAE

ARCH=${ARCH:-amd64}
case $ARCH in
amd64)
  TYPE_ROOT=$TYPE_ROOT_X86_64 CONSOLE=ttyS0
  KERNEL_CMDLINE="root=PARTUUID=$ROOT_PARTUUID ro console=tty0 console=ttyS0,115200n8 panic=10 no_timer_check" ;;
arm64)
  TYPE_ROOT=$TYPE_ROOT_ARM64 CONSOLE=ttyAMA0
  KERNEL_CMDLINE="root=PARTUUID=$ROOT_PARTUUID ro console=ttyAMA0,115200n8 panic=10" ;;
*) echo "ARCH=$ARCH: amd64 or arm64" >&2; exit 2 ;;
esac

# Packages on top of --variant=minbase. Recommends are NOT installed, so
# everything needed is listed explicitly.
PACKAGES=(
  linux-image-$ARCH initramfs-tools zstd   # kernel + initrd (zstd-compressed)
  systemd-sysv udev                        # init
  cloud-init cloud-guest-utils             # NoCloud seed; growpart for the root fs
  ifupdown isc-dhcp-client iproute2        # cloud-init's "eni" renderer + DHCP
  python3 ca-certificates
  tpm2-tools                               # the report script's TPM quote (tpm2_load, tpm2_quote)
  cryptsetup-initramfs clevis-initramfs    # an encrypted root: unlocked in the initramfs from cryptopts=
  clevis-tpm2 clevis-luks                  #   with Clevis's TPM2 pin; sealed anew at first boot (report script)
  e2fsprogs                                # resize2fs for cloud-init resizefs
)
ARCH_OPTS=()
# shellcheck source=arm64.sh
[ "$ARCH" = arm64 ] && . "$(dirname "$0")/arm64.sh"   # its PACKAGES, ARCH_OPTS, arm64_early, arm64_native
INCLUDE=$(IFS=,; echo "${PACKAGES[*]}")${EXTRA_PACKAGES:+,$EXTRA_PACKAGES}

# ---------------------------------------------------------------- helpers
log() { printf '[build-image %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s; }

[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap root mode, root-owned files)"

ensure_host_tools() {
  local missing=() c p cmds files
  # command:package
  cmds=(mmdebstrap:mmdebstrap mcopy:mtools mkfs.vfat:dosfstools mkfs.ext4:e2fsprogs sfdisk:fdisk gzip:gzip sha256sum:coreutils)
  files=()
  if [ "$ARCH" = amd64 ]; then
    cmds+=(syslinux:syslinux)
    files+=(/usr/lib/syslinux/mbr/gptmbr.bin:syslinux-common
            /usr/lib/shim/shimx64.efi.signed:shim-signed
            /usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed:grub-efi-amd64-signed)
  else
    cmds+=(arch-test:arch-test update-binfmts:binfmt-support qemu-aarch64-static:qemu-user-static)
  fi
  for c in "${cmds[@]}"; do
    command -v "${c%%:*}" >/dev/null || missing+=("${c#*:}")
  done
  for p in "${files[@]}"; do
    [ -e "${p%%:*}" ] || missing+=("${p#*:}")
  done
  if [ "$ARCH" = arm64 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    log "dpkg --add-architecture arm64 (the ESP's signed shim and GRUB are arm64 packages)"
    dpkg --add-architecture arm64 && apt-get update -qq >&2
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing host packages: ${missing[*]}"
    apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
      { apt-get update >&2 && apt-get install -y --no-install-recommends "${missing[@]}" >&2; }
  fi
}

# ---------------------------------------------------------------- main
T_START=$(now)
ensure_host_tools

mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
WORK=$(mktemp -d "$OUT_DIR/.work.XXXXXX")
chmod 755 "$WORK"        # lets apt's _apt user download into the chroot (sandboxed)
cleanup() { [ "${IMG_KEEP_WORK:-0}" = 1 ] && log "work dir kept: $WORK" || rm -rf "$WORK"; }
trap cleanup EXIT
ROOTFS=$WORK/rootfs

# The arm64 ESP's signed shim, MokManager and GRUB, from Debian's arm64
# packages (downloaded, unpacked aside, not installed): first, so a missing
# one fails the build before the long part.
if [ "$ARCH" = arm64 ]; then
  mkdir -p "$WORK/efi-debs" "$WORK/efi"
  EFI_DEBS=(shim-signed:arm64 shim-helpers-arm64-signed:arm64 grub-efi-arm64-signed:arm64)
  (cd "$WORK/efi-debs" && apt-get download -qq "${EFI_DEBS[@]}" >&2)
  for d in "$WORK"/efi-debs/*.deb; do dpkg-deb -x "$d" "$WORK/efi"; done
  for f in shim/shimaa64.efi.signed shim/mmaa64.efi.signed grub/arm64-efi-signed/grubaa64.efi.signed; do
    [ -f "$WORK/efi/usr/lib/$f" ] || die "$f is not in ${EFI_DEBS[*]}"
  done
fi

# 1. Root filesystem tree with mmdebstrap --------------------------------
# The initramfs config must exist before the kernel package builds the
# initramfs, so it is synced in by an --essential-hook (runs before the
# --include packages are installed). FSTYPE=ext4: in a chroot the fsck hook
# cannot probe the root device, and without it the initramfs has no
# fsck.ext4 ("Warning: fsck not present, so skipping root file system").
EARLY=$WORK/early
mkdir -p "$EARLY/etc/initramfs-tools/conf.d"
chmod 755 "$EARLY"
printf 'MODULES=most\nCOMPRESS=zstd\nFSTYPE=ext4\n' > "$EARLY/etc/initramfs-tools/conf.d/e2e-image.conf"
[ "$ARCH" = arm64 ] && arm64_early "$EARLY"

log "mmdebstrap $SUITE (minbase + $INCLUDE)"
T0=$(now)
mmdebstrap --variant=minbase --mode=root --format=directory "${ARCH_OPTS[@]}" \
  --aptopt='APT::Install-Recommends "false"' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --essential-hook="sync-in $EARLY /" \
  --include="$INCLUDE" \
  "$SUITE" "$ROOTFS" \
  "deb $DEBIAN_MIRROR $SUITE main" \
  "deb $DEBIAN_MIRROR $SUITE-updates main" \
  "deb $DEBIAN_SECURITY_MIRROR $SUITE-security main" 2>&1 |
  while IFS= read -r line; do printf '[%(%H:%M:%S)T] %s\n' -1 "$line"; done >&2 ||   # each line's time: where a build's time goes
  die "mmdebstrap failed (its lines above)"   # pipefail: the pipeline fails with it
[ "$ARCH" = arm64 ] && arm64_native "$ROOTFS"
T_MMDEBSTRAP=$(( $(now) - T0 ))
log "mmdebstrap took ${T_MMDEBSTRAP}s"

# 2. Configure the tree ---------------------------------------------------
log "configuring rootfs"
R=$ROOTFS
[ -n "$R" ] && [ "$R" != / ] && [ -d "$R/etc" ] || die "bad rootfs dir '$R'"   # never touch the host's /etc
echo localhost > "$R/etc/hostname"          # cloud-init sets the real one
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' > "$R/etc/hosts"
rm -f "$R/etc/resolv.conf"; : > "$R/etc/resolv.conf"   # host's copy out; dhclient fills it
echo uninitialized > "$R/etc/machine-id"     # new machine-id + first-boot semantics
rm -f "$R/var/lib/dbus/machine-id" "$R/var/lib/systemd/random-seed"

cat > "$R/etc/fstab" <<FSTAB
# <file system>                                         <mount point> <type> <options>         <dump> <pass>
PARTUUID=$ROOT_PARTUUID  /             ext4   errors=remount-ro 0      1
FSTAB
# C.UTF-8 is built into glibc. cloud-init's default locale (en_US.UTF-8)
# would need locale-gen; without it cloud-config.service fails with
# "update-locale: Error: invalid locale settings:  LANG=en_US.UTF-8".
echo LANG=C.UTF-8 > "$R/etc/default/locale"

# ifupdown: loopback here; cloud-init writes interfaces.d/50-cloud-init.
cat > "$R/etc/network/interfaces" <<'EOF'
auto lo
iface lo inet loopback

source /etc/network/interfaces.d/*
EOF
mkdir -p "$R/etc/network/interfaces.d"

# Serial getty on the console (systemd would also derive it from console=).
mkdir -p "$R/etc/systemd/system/getty.target.wants"
ln -sf /lib/systemd/system/serial-getty@.service \
  "$R/etc/systemd/system/getty.target.wants/serial-getty@$CONSOLE.service"

# cloud-init always runs. Debian enables it from a systemd generator
# (ds-identify, a long shell script), and systemd kills the generators
# still running after 90 s: a first boot on a loaded TCG host (CI's e2e
# stage) then came up with cloud-init off — hostname localhost, no seed
# read, no report. With a single datasource ds-identify would enable it
# anyway; the link makes that not depend on the host's load.
mkdir -p "$R/etc/systemd/system/multi-user.target.wants"
ln -sf /lib/systemd/system/cloud-init.target "$R/etc/systemd/system/multi-user.target.wants/cloud-init.target"

# cloud-init: only NoCloud (seed dir on the root fs), else None (fallback
# network config = DHCP on the first NIC).
cat > "$R/etc/cloud/cloud.cfg.d/90-e2e-image.cfg" <<'EOF'
datasource_list: [ NoCloud, None ]
locale: C.UTF-8
EOF

# Kernel + initrd go to the ESP; keep them in /boot too (harmless, small).
KVER=$(cd "$R/lib/modules" && ls | sort -V | tail -n1)
[ -f "$R/boot/vmlinuz-$KVER" ] && [ -f "$R/boot/initrd.img-$KVER" ] ||
  die "kernel/initrd for $KVER not found in rootfs"
log "kernel $KVER"

dpkg-query --admindir="$R/var/lib/dpkg" -W -f '${Package} ${Version}\n' > "$WORK/packages.txt"

# Clamp all mtimes to SOURCE_DATE_EPOCH (files generated during the build).
find "$R" -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + 

# 3. Root ext4 image from the tree (no mount) -----------------------------
ROOT_USED_MB=$(du -s --block-size=1M --apparent-size "$R" | cut -f1)
# ext4 metadata/journal overhead ~10%, + requested free space, round to 4 MiB.
ROOT_MB=$(( (ROOT_USED_MB * 110 / 100 + ROOT_FREE_MB + 3) / 4 * 4 ))
log "root fs: ${ROOT_USED_MB} MiB used -> ${ROOT_MB} MiB ext4"
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH mkfs.ext4 -q -F -t ext4 \
  -L "$ROOT_LABEL" -U "$ROOT_FS_UUID" -E "hash_seed=$ROOT_FS_UUID,nodiscard" \
  -m 1 -d "$R" "$WORK/root.img" "${ROOT_MB}M" >&2
# mkfs -d (e2fsprogs 1.47.0) copies each file's atime and ctime from the
# tree; those are build-time values (ctime cannot be set with touch), so
# reset them with debugfs. mkfs -d allocates inodes sequentially, so the
# used inodes are 1..USED (1-10 reserved, 11 lost+found).
ROOT_USED_INODES=$(debugfs -R stats "$WORK/root.img" 2>/dev/null |
  awk -F: '/^Inode count/ {c=$2} /^Free inodes/ {f=$2} END {print c-f}')
if debugfs -R "testi <$((ROOT_USED_INODES + 1))>" "$WORK/root.img" 2>/dev/null | grep -q 'not in use'; then
  for ((i = 2; i <= ROOT_USED_INODES; i++)); do
    [ "$i" -ge 3 ] && [ "$i" -le 10 ] && continue
    echo "set_inode_field <$i> atime @$SOURCE_DATE_EPOCH"
    echo "set_inode_field <$i> ctime @$SOURCE_DATE_EPOCH"
  done > "$WORK/times.debugfs"
  E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH debugfs -w -f "$WORK/times.debugfs" "$WORK/root.img" >/dev/null 2>&1 ||
    die "debugfs (time reset) failed"
else
  log "WARNING: inodes not allocated contiguously; atime/ctime not reset (image not bit-reproducible)"
fi
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH e2fsck -fn "$WORK/root.img" >&2 || die "e2fsck of root.img failed"

# 4. ESP (FAT) with syslinux + shim/GRUB + kernel (no mount) -------------
ESP=$WORK/esp.img
ESP_STAGE=$WORK/esp
mkdir -p "$ESP_STAGE/EFI/BOOT" "$ESP_STAGE/EFI/debian"
cp "$R/boot/vmlinuz-$KVER" "$ESP_STAGE/vmlinuz"
cp "$R/boot/initrd.img-$KVER" "$ESP_STAGE/initrd.img"
# UEFI: shim at the removable-media fallback path loads grub<arch>.efi
# beside it (no fb<arch>: no boot entry is written); Debian's signed GRUB
# reads /EFI/debian/grub.cfg (its prefix), else the one beside it.
if [ "$ARCH" = amd64 ]; then
  mkdir -p "$ESP_STAGE/syslinux"
  cp /usr/lib/shim/shimx64.efi.signed "$ESP_STAGE/EFI/BOOT/BOOTX64.EFI"
  cp /usr/lib/shim/mmx64.efi.signed "$ESP_STAGE/EFI/BOOT/mmx64.efi"
  cp /usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed "$ESP_STAGE/EFI/BOOT/grubx64.efi"
else
  # The arm64 signed binaries (fetched before mmdebstrap, below).
  cp "$WORK/efi/usr/lib/shim/shimaa64.efi.signed" "$ESP_STAGE/EFI/BOOT/BOOTAA64.EFI"
  cp "$WORK/efi/usr/lib/shim/mmaa64.efi.signed" "$ESP_STAGE/EFI/BOOT/mmaa64.efi"
  cp "$WORK/efi/usr/lib/grub/arm64-efi-signed/grubaa64.efi.signed" "$ESP_STAGE/EFI/BOOT/grubaa64.efi"
  apt-cache policy "${EFI_DEBS[@]}" | awk '/^[^ ]/{p=$1} /Candidate:/{print p, $2}' >> "$WORK/packages.txt"
fi
for cfg in "$ESP_STAGE/EFI/debian/grub.cfg" "$ESP_STAGE/EFI/BOOT/grub.cfg"; do
  cat > "$cfg" <<EOF
set timeout=0
search --no-floppy --fs-uuid --set=root ${ESP_VOLID:0:4}-${ESP_VOLID:4:4}
echo "Debian 12 e2e image ($KVER)"
linux /vmlinuz $KERNEL_CMDLINE
initrd /initrd.img
boot
EOF
done
# BIOS: syslinux (ldlinux.sys/.c32 are added by `syslinux --install` below).
[ "$ARCH" = amd64 ] && cat > "$ESP_STAGE/syslinux/syslinux.cfg" <<EOF
SERIAL 0 115200
DEFAULT debian
PROMPT 0
TIMEOUT 0
LABEL debian
  LINUX /vmlinuz
  INITRD /initrd.img
  APPEND $KERNEL_CMDLINE
EOF
find "$ESP_STAGE" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

ESP_SECTORS=$(( ESP_MB * 2048 ))
# -h 2048: "hidden sectors" = partition start, as a real partition would have.
mkfs.vfat --invariant -i "$ESP_VOLID" -n "$ESP_LABEL" -h 2048 \
  -C "$ESP" $(( ESP_MB * 1024 )) >&2
export MTOOLS_SKIP_CHECK=1
mcopy -s -p -m -Q -i "$ESP" "$ESP_STAGE"/* ::/

# 5. Assemble the GPT disk (no loop device) -------------------------------
ESP_START=2048
ROOT_START=$(( ESP_START + ESP_SECTORS ))
ROOT_SECTORS=$(( ROOT_MB * 2048 ))
DISK_SECTORS=$(( ROOT_START + ROOT_SECTORS + 2048 ))   # 1 MiB tail for backup GPT
DISK=$WORK/debian.raw
rm -f "$DISK"
truncate -s $(( DISK_SECTORS * 512 )) "$DISK"
sfdisk --quiet --wipe=never --wipe-partitions=never "$DISK" >&2 <<EOF
label: gpt
label-id: $DISK_GUID
unit: sectors
first-lba: 2048
sector-size: 512

start=$ESP_START, size=$ESP_SECTORS, type=$TYPE_ESP, uuid=$ESP_PARTUUID, name="$ESP_LABEL", attrs="LegacyBIOSBootable"
start=$ROOT_START, size=$ROOT_SECTORS, type=$TYPE_ROOT, uuid=$ROOT_PARTUUID, name="$ROOT_LABEL"
EOF
dd if="$ESP" of="$DISK" bs=1M seek=$(( ESP_START / 2048 )) conv=notrunc,sparse status=none
dd if="$WORK/root.img" of="$DISK" bs=1M seek=$(( ROOT_START / 2048 )) conv=notrunc,sparse status=none
# Legacy BIOS: syslinux's GPT-aware MBR boot code (first 440 bytes only, the
# protective MBR partition entry stays), then ldlinux into the ESP in place.
if [ "$ARCH" = amd64 ]; then
  dd if=/usr/lib/syslinux/mbr/gptmbr.bin of="$DISK" bs=440 count=1 conv=notrunc status=none
  syslinux --install --offset $(( ESP_START * 512 )) --directory /syslinux "$DISK"
fi
sfdisk --verify "$DISK" >&2 || die "sfdisk --verify failed"

# 6. Outputs ---------------------------------------------------------------
log "writing outputs"
rm -f "$OUT_DIR/debian.raw" "$OUT_DIR/debian.raw.gz"
mv "$DISK" "$OUT_DIR/debian.raw"
gzip -1 -n -c "$OUT_DIR/debian.raw" > "$OUT_DIR/debian.raw.gz.tmp"
mv "$OUT_DIR/debian.raw.gz.tmp" "$OUT_DIR/debian.raw.gz"
cp "$WORK/packages.txt" "$OUT_DIR/packages.txt"

T_TOTAL=$(( $(now) - T_START ))
{
  echo "suite: $SUITE  arch: $ARCH  kernel: $KVER  SOURCE_DATE_EPOCH: $SOURCE_DATE_EPOCH"
  echo "cmdline: $KERNEL_CMDLINE"
  echo "mmdebstrap_seconds: $T_MMDEBSTRAP  total_seconds: $T_TOTAL"
  echo "raw_bytes: $(stat -c %s "$OUT_DIR/debian.raw")  raw_allocated_kib: $(du -k "$OUT_DIR/debian.raw" | cut -f1)  gz_bytes: $(stat -c %s "$OUT_DIR/debian.raw.gz")"
  echo "layout (sfdisk --dump):"
  sfdisk --dump "$OUT_DIR/debian.raw"
  echo "sha256:"
  (cd "$OUT_DIR" && sha256sum debian.raw debian.raw.gz)
} > "$OUT_DIR/build-info.txt"
log "done in ${T_TOTAL}s (mmdebstrap ${T_MMDEBSTRAP}s)"
(cd "$OUT_DIR" && sha256sum debian.raw debian.raw.gz)
