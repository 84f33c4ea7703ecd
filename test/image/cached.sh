#!/bin/bash
# cached.sh [ARCH]: the Debian test image (build-image.sh) for ARCH (amd64,
# the default, or arm64), built once for each version of that script and
# kept in the user's cache:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/bootops/debian-image/<key>/debian.raw.gz
#   ${XDG_CACHE_HOME:-$HOME/.cache}/bootops/debian-image-arm64/<key>/debian.raw.gz
# where <key> is the first 16 hex digits of the script's sha256 (for arm64,
# of build-image.sh and arm64.sh together). Prints
# that folder. Callers at once build it once: `make test` starts it first,
# in the background, and the e2e tests (TestMain) wait on its lock.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
arch=${1:-amd64}
files=("$here/build-image.sh")
[ "$arch" = amd64 ] || files+=("$here/$arch.sh")
key=$(cat "${files[@]}" | sha256sum | cut -c1-16)
base=${XDG_CACHE_HOME:-$HOME/.cache}/bootops/debian-image
[ "$arch" = amd64 ] || base=$base-$arch
dir=$base/$key
mkdir -p "$base"
exec 9>"$dir.lock"
flock 9
if [ ! -f "$dir/debian.raw.gz" ]; then
	tmp=$dir.tmp-$$
	rm -rf "$tmp"
	start=$(date +%s)
	ARCH=$arch bash "$here/build-image.sh" "$tmp" >&2
	rm -f "$tmp/debian.raw" # the gzip is what is served
	rm -rf "$dir"
	mv "$tmp" "$dir"
	echo "cached.sh: built $dir in $(($(date +%s) - start)) s" >&2
fi
echo "$dir"
