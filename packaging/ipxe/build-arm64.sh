#!/usr/bin/env bash
# The iPXE for 64-bit ARM UEFI machines (snp.efi), which Debian does not
# ship: built from Debian's own ipxe source package (the same version as
# the x86 builds in /usr/lib/ipxe) with Debian's cross compiler, with the
# embedded script and options of Debian's x86 build left as they are.
# Reproducible: the source's sha256 comes from Debian's signed archive, the
# build's timestamps from the changelog (SOURCE_DATE_EPOCH); two builds
# give the same bytes (make ipxe-arm64 twice, then compare).
#
#   bash packaging/ipxe/build-arm64.sh OUT_DIR     # writes OUT_DIR/snp.efi
#
# It reads Debian's sources without touching the system's apt configuration
# (a list of its own under the work folder), and needs gcc-aarch64-linux-gnu,
# make, perl and liblzma-dev (make ipxe-arm64 installs them).
set -euo pipefail
out=${1:?usage: build-arm64.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${IPXE_WORK:-/var/tmp/bootops-ipxe-arm64}
mkdir -p "$work/lists/partial" "$work/archives/partial"
. /etc/os-release
# Debian's source archive, as the system's binary one names it.
cat > "$work/sources.list" <<SRC
deb-src http://deb.debian.org/debian ${VERSION_CODENAME} main
deb-src http://deb.debian.org/debian ${VERSION_CODENAME}-updates main
SRC
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=-" -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives" -o APT::Get::List-Cleanup=0)
version=$(dpkg-query -W -f '${source:Version}' ipxe 2>/dev/null || true)
apt-get "${apt_opts[@]}" -qq update
cd "$work"
rm -rf src && mkdir src && cd src
if [ -n "$version" ]; then
	apt-get "${apt_opts[@]}" -qq source --download-only "ipxe=$version" || apt-get "${apt_opts[@]}" -qq source --download-only ipxe
else
	apt-get "${apt_opts[@]}" -qq source --download-only ipxe
fi
dsc=$(ls ipxe_*.dsc | head -1)
dpkg-source -q -x "$dsc" tree >/dev/null
cd tree
export SOURCE_DATE_EPOCH=$(dpkg-parsechangelog -STimestamp)
echo "ipxe arm64: Debian's source $(dpkg-parsechangelog -SVersion), SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH" >&2
make -s -C src -j"$(nproc)" CROSS=aarch64-linux-gnu- bin-arm64-efi/snp.efi >&2
install -m 0644 src/bin-arm64-efi/snp.efi "$out/snp.efi"
sha256sum "$out/snp.efi" >&2
