#!/usr/bin/env bash
# The arm64 pieces bootops builds an arm64 Micro-OS and boots arm64
# machines with, from Debian's own arm64 packages (apt fetches
# foreign-architecture packages once dpkg knows the architecture), unpacked
# into one folder standing for an arm64 system's root — nothing installed:
#
#   kernel and modules   linux-image-arm64 (depmod run on the unpacked tree)
#   busybox              busybox-static
#   the Micro-OS tools   cryptsetup-bin, nvme-cli, hdparm, and the libraries they link
#   the shim chain       shim-signed (shimaa64.efi.signed), grub-efi-arm64-signed (grubnetaa64.efi.signed)
#   the UKI's stub       systemd-boot-efi (linuxaa64.efi.stub)
#
#   bash test/arm64/root.sh DIR        # DIR/root, DIR/debs; prints the kernel's path
#
# Cached: a DIR whose stamp names the same package versions is left alone.
set -euo pipefail
dir=${1:?usage: root.sh DIR}
mkdir -p "$dir/debs"
dir=$(cd "$dir" && pwd)
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	dpkg --add-architecture arm64
	apt-get update -qq
fi
top=(linux-image-arm64 busybox-static cryptsetup-bin nvme-cli hdparm shim-signed grub-efi-arm64-signed systemd-boot-efi)
kernel=$(apt-cache depends linux-image-arm64:arm64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
kernel=${kernel%:arm64}
# The tools' libraries: every lib* package of their dependency closure.
libs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances \
	cryptsetup-bin:arm64 nvme-cli:arm64 hdparm:arm64 2>/dev/null | grep -E '^(lib|zlib)[a-z0-9.+-]*:arm64$' | sort -u)
pkgs=("${top[@]/%/:arm64}" "$kernel:arm64" $libs)
stamp=$(apt-cache policy "${pkgs[@]}" | awk '/^[^ ]/{p=$1} /Candidate:/{print p, $2}' | sort)
if [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$stamp" ] && [ -d "$dir/root/boot" ]; then
	ls "$dir"/root/boot/vmlinuz-*
	exit 0
fi
rm -rf "$dir/root" "$dir/debs" && mkdir -p "$dir/root" "$dir/debs"
(cd "$dir/debs" && apt-get download -qq "${pkgs[@]}" 2>&1 | grep -v "unsandboxed" >&2 || true)
for d in "$dir"/debs/*.deb; do dpkg-deb -x "$d" "$dir/root"; done
# Merged /usr, as a Debian 12 system has it (its packages still ship
# /bin, /sbin and /lib): /sbin/cryptsetup is /usr/sbin/cryptsetup.
for top in bin sbin lib; do
	if [ -d "$dir/root/$top" ] && [ ! -L "$dir/root/$top" ]; then
		mkdir -p "$dir/root/usr/$top"
		cp -a "$dir/root/$top/." "$dir/root/usr/$top/"
		rm -rf "$dir/root/$top"
	fi
	ln -sfn "usr/$top" "$dir/root/$top"
done
version=$(basename "$dir"/root/lib/modules/*)
depmod -b "$dir/root" "$version"
echo "$stamp" > "$dir/stamp"
ls "$dir"/root/boot/vmlinuz-*
