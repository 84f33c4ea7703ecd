#!/usr/bin/env bash
# make demo: PXE-boot a VM from the demo repository in sites/.
#
# It builds a LAN out of network namespaces (198.18.0.0/24, nothing leaves
# the machine): dnsmasq plays the site's own DHCP server, bootops serves
# sites/ in proxy mode, and a QEMU VM (SeaBIOS + iPXE, software emulation)
# registered only by its serial number boots the Micro-OS chosen for it.
# The Micro-OS is still the test one (it prints who it is and powers off);
# the installing agent comes with its own issue. Everything is removed at
# the end, even on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
bootops=$PWD/bin/bootops
bold() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
[ "$(id -u)" = 0 ] || { echo "make demo needs root (network namespaces, a tap device)"; exit 1; }

bold "the Micro-OS: the Debian kernel and a busybox initramfs"
kernel=$(ls /boot/vmlinuz-* | sort -V | tail -1)
cp "$kernel" sites/microos/vmlinuz
go run ./test/microos -o sites/microos/initrd.img
ls -l sites/microos/vmlinuz sites/microos/initrd.img

bold "bootops validate sites"
$bootops validate sites
bold "bootops explain sites --serial DEMO-0001        (what the VM will get)"
$bootops explain sites --serial DEMO-0001

id=$$
lan=bo-demo-lan-$id dhcpns=bo-demo-dhcp-$id work=$(mktemp -d)
cleanup() {
  set +e
  [ -n "${qemu_pid:-}" ] && kill "$qemu_pid" 2>/dev/null
  [ -n "${serve_pid:-}" ] && kill "$serve_pid" 2>/dev/null
  [ -f "$work/dnsmasq.pid" ] && kill "$(cat "$work/dnsmasq.pid")" 2>/dev/null
  wait 2>/dev/null
  ip netns del "$lan" 2>/dev/null
  ip netns del "$dhcpns" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

bold "a LAN in network namespaces: bridge br0 198.18.0.1/24, dnsmasq at 198.18.0.2"
ip netns add "$lan"; ip netns add "$dhcpns"
ip -n "$lan" link set lo up
ip -n "$lan" link add br0 type bridge
ip -n "$lan" addr add 198.18.0.1/24 dev br0
ip -n "$lan" link set br0 up
ip -n "$lan" link add vdhcp type veth peer name eth0 netns "$dhcpns"
ip -n "$lan" link set vdhcp master br0 up
ip -n "$dhcpns" addr add 198.18.0.2/24 dev eth0
ip -n "$dhcpns" link set eth0 up
ip netns exec "$dhcpns" dnsmasq --port=0 --interface=eth0 --bind-interfaces \
  --dhcp-range=198.18.0.100,198.18.0.199,255.255.255.0,10m --dhcp-leasefile="$work/leases" --pid-file="$work/dnsmasq.pid"
ip -n "$lan" tuntap add dev tap-demo mode tap
ip -n "$lan" link set tap-demo master br0 up

bold "bootops serve --source sites --dhcp proxy --interface br0"
ip netns exec "$lan" "$bootops" serve --source sites --state-dir "$work/state" --http-addr 198.18.0.1:8080 \
  --tftp-addr 198.18.0.1:69 --interface br0 --log-format text >"$work/bootops.log" 2>&1 &
serve_pid=$!
for _ in $(seq 50); do grep -q 'msg=serving' "$work/bootops.log" && break; sleep 0.2; done
grep 'msg=serving' "$work/bootops.log"

bold "a VM with SMBIOS serial DEMO-0001 powers on (QEMU, SeaBIOS + iPXE)"
ip netns exec "$lan" qemu-system-x86_64 -accel tcg -m 512 -nographic -no-reboot -monitor none \
  -serial file:"$work/console" -netdev tap,id=n0,ifname=tap-demo,script=no,downscript=no \
  -device virtio-net-pci,netdev=n0,mac=52:54:00:de:00:99 -boot n -smbios type=1,serial=DEMO-0001 >/dev/null 2>&1 &
qemu_pid=$!

status() { ip netns exec "$lan" "$bootops" status --server http://198.18.0.1:8080; }
for i in $(seq 60); do
  sleep 5
  bold "bootops status   ($((i * 5)) s)"
  status
  grep -q BOOTOPS-MICROOS "$work/console" 2>/dev/null && break
done
sleep 1 # the console line may still be being written
bold "the VM's console"
if grep BOOTOPS-MICROOS "$work/console"; then
  echo "the VM booted the Micro-OS of node vm-serial, chosen by its serial number"
else
  echo "the VM did not reach its Micro-OS; bootops log:"; tail -30 "$work/bootops.log"; exit 1
fi
bold "what bootops saw"
grep -E 'msg=(dhcp|tftp|script)' "$work/bootops.log" | head -20
