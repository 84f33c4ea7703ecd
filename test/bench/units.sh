#!/usr/bin/env bash
# test/bench/units.sh: systemd's exposure score of bootops' units beside
# those of Debian's own DHCP servers (kea, dnsmasq), in one run.
#   bash test/bench/units.sh
# Needs systemd-analyze (systemd ≥ 252 for --offline) and apt-get download.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp" # apt-get download writes as _apt
(cd "$tmp" && apt-get download kea-dhcp4-server dnsmasq >/dev/null) ||
  { echo "units.sh: apt-get download failed (run apt-get update?)" >&2; exit 1; }
for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$tmp/root"; done
printf '%-28s %s\n' unit exposure
for u in packaging/deb/files/bootops.service packaging/deb/files/bootops-hub.service \
  "$tmp"/root/lib/systemd/system/kea-dhcp4-server.service "$tmp"/root/lib/systemd/system/dnsmasq.service; do
  score=$(systemd-analyze security --offline=yes "$u" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: //p')
  printf '%-28s %s\n' "$(basename "$u")" "$score"
done
