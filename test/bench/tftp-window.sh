#!/usr/bin/env bash
# TFTP with and without RFC 7440 windowsize, from an RFC 7440 client
# (atftp 0.8): N sequential fetches of ipxe.efi, blksize 1468, from
# dnsmasq (no windowsize: it answers lock-step) and from bootops, once
# lock-step and once with "windowsize 8". All on loopback.
#
#   bash test/bench/tftp-window.sh [N]      (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash test/deps.sh atftp dnsmasq-base ipxe
n=${1:-50}
work=$(mktemp -d); chmod 755 "$work"
pids=()
cleanup() { set +e; for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
go build -o "$work/bootops" ./cmd/bootops
mkdir -p "$work/tftp" "$work/repo"
cp -L /usr/lib/ipxe/ipxe.efi "$work/tftp/"; chmod -R a+rX "$work/tftp"
cp -r sites/. "$work/repo"; echo k > "$work/repo/microos/vmlinuz"; echo i > "$work/repo/microos/initrd.img"
dnsmasq --keep-in-foreground --port=0 --enable-tftp --tftp-root="$work/tftp" --listen-address=127.0.0.2 \
  --bind-interfaces --interface=lo --pid-file="$work/dnsmasq.pid" 2>"$work/dnsmasq.log" & pids+=($!)
"$work/bootops" serve --source "$work/repo" --state-dir "$work/state" --dhcp off --tftp-addr 127.0.0.4:69 \
  --ipxe-dir "$work/tftp" --http-addr 127.0.0.1:18083 --log-format text 2>"$work/bootops.log" & pids+=($!)
sleep 2
size=$(stat -c %s "$work/tftp/ipxe.efi")
want=$(sha256sum < "$work/tftp/ipxe.efi")
fetch() { # NAME HOST OPTIONS…
  local name=$1 host=$2; shift 2
  local t0 t1
  t0=$(date +%s%N)
  for _ in $(seq "$n"); do
    atftp "$@" --option "blksize 1468" -g -r ipxe.efi -l "$work/got" "$host" 69 >/dev/null 2>&1
  done
  t1=$(date +%s%N)
  [ "$(sha256sum < "$work/got")" = "$want" ] || { echo "$name: wrong bytes" >&2; exit 1; }
  awk -v name="$name" -v n="$n" -v size="$size" -v ns=$((t1 - t0)) \
    'BEGIN { s = ns / 1e9; printf "| %s | %d | %.2f | %.1f |\n", name, n, s, n * size / s / 1e6 }'
}
echo "atftp 0.8, $n sequential fetches of ipxe.efi ($size bytes), blksize 1468, loopback"
echo
echo "| server, client options | fetches | seconds | MB/s |"
echo "| --- | --- | --- | --- |"
for round in 1 2 3; do
  fetch "dnsmasq, lock-step" 127.0.0.2
  fetch "dnsmasq, asked windowsize 8 (not supported: lock-step)" 127.0.0.2 --option "windowsize 8"
  fetch "bootops, lock-step" 127.0.0.4
  fetch "bootops, windowsize 8" 127.0.0.4 --option "windowsize 8"
done
