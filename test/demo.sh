#!/usr/bin/env bash
# make demo: provision a VM from the demo repository in sites/, end to end.
#
# It builds a LAN out of network namespaces (198.18.0.0/24, nothing leaves
# the machine): dnsmasq plays the site's own DHCP server, bootops serves
# sites/ in proxy mode, and a QEMU VM (SeaBIOS + iPXE, software emulation)
# with a blank disk, registered only by its serial number, PXE-boots the
# Micro-OS (Debian's kernel + the bootops agent), installs a real Debian
# image, writes its cloud-init seed, reports every step and reboots; its
# next boot is from its disk, where Debian comes up with the hostname its
# seed gave and reports: running. Everything is removed at the end, even on
# failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
bootops=$PWD/bin/bootops
bold() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
[ "$(id -u)" = 0 ] || { echo "make demo needs root (network namespaces, a tap device)"; exit 1; }

id=$$
lan=bo-demo-lan-$id dhcpns=bo-demo-dhcp-$id work=$(mktemp -d)
cleanup() {
  set +e
  [ -n "${qemu_pid:-}" ] && kill "$qemu_pid" 2>/dev/null
  [ -n "${serve_pid:-}" ] && kill "$serve_pid" 2>/dev/null
  [ -n "${images_pid:-}" ] && kill "$images_pid" 2>/dev/null
  [ -f "$work/dnsmasq.pid" ] && kill "$(cat "$work/dnsmasq.pid")" 2>/dev/null
  wait 2>/dev/null
  ip netns del "$lan" 2>/dev/null
  ip netns del "$dhcpns" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

bold "bootops microos build: Debian's kernel + an initramfs with the agent"
kernel=$(ls /boot/vmlinuz-* | sort -V | tail -1)
$bootops microos build --kernel "$kernel" --agent bin/bootops-agent -o sites/microos | sed -n '1,3p'

bold "the demo OS image: Debian 12 from Debian's packages (BIOS and UEFI, cloud-init), built once and cached"
# The same image and cache as the end-to-end tests: keyed by the script's hash.
key=$(sha256sum test/image/build-image.sh | cut -c1-16)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/bootops/debian-image/$key
if [ ! -f "$cache/debian.raw.gz" ]; then
  echo "building it (about 2 minutes; the log: $work/build-image.log)"
  bash test/image/build-image.sh "$cache.tmp-$$" >"$work/build-image.log" 2>&1 || { tail -20 "$work/build-image.log"; exit 1; }
  rm -f "$cache.tmp-$$/debian.raw"; rm -rf "$cache"; mv "$cache.tmp-$$" "$cache"
fi
mkdir -p "$work/images"
ln -s "$cache/debian.raw.gz" "$work/images/demo-disk.raw.gz"
sha=$(sha256sum "$cache/debian.raw.gz" | cut -d' ' -f1)
echo "demo-disk.raw.gz (Debian 12, $(du -h "$cache/debian.raw.gz" | cut -f1)) sha256 $sha"
# The repository served: sites/, with the fresh image's sha256.
cp -r sites "$work/sites"
sed -i "s/sha256: dec0de00[0-9a-f]*/sha256: $sha/" "$work/sites/profiles/demo-disk.yaml"

bold "bootops validate sites"
$bootops validate "$work/sites"
bold "bootops explain sites --serial DEMO-0001        (what the VM will get)"
$bootops explain "$work/sites" --serial DEMO-0001

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
go build -o "$work/imageserver" ./test/e2e/imageserver
ip netns exec "$lan" "$work/imageserver" -dir "$work/images" -addr 198.18.0.1:8081 2>"$work/images.log" &
images_pid=$!

bold "bootops serve --source sites --dhcp proxy --interface br0"
ip netns exec "$lan" "$bootops" serve --source "$work/sites" --state-dir "$work/state" --http-addr 198.18.0.1:8080 \
  --tftp-addr 198.18.0.1:69 --interface br0 --log-format text >"$work/bootops.log" 2>&1 &
serve_pid=$!
for _ in $(seq 50); do grep -q 'msg=serving' "$work/bootops.log" && break; sleep 0.2; done
grep 'msg=serving' "$work/bootops.log"
# Reads need an operator's token: serve made one in its state folder.
export BOOTOPS_TOKEN_FILE="$work/state/operator-token"

bold "a VM with SMBIOS serial DEMO-0001 and a blank 3 GB disk powers on (QEMU, SeaBIOS + iPXE)"
truncate -s 3G "$work/disk.img"
vm() {
  ip netns exec "$lan" qemu-system-x86_64 -accel tcg -m 768 -nographic -no-reboot -monitor none \
    -serial file:"$work/console$1" -netdev tap,id=n0,ifname=tap-demo,script=no,downscript=no \
    -device virtio-net-pci,netdev=n0,mac=52:54:00:de:00:99,bootindex=1 -smbios type=1,serial=DEMO-0001 \
    -drive file="$work/disk.img",if=none,id=d0,format=raw -device virtio-blk-pci,drive=d0,bootindex=2 >/dev/null 2>&1 &
  qemu_pid=$!
}
vm 1

status() { ip netns exec "$lan" "$bootops" status --server http://198.18.0.1:8080 "$@"; }
state_of() { status -o json | python3 -c 'import json,sys; d=json.load(sys.stdin); print([n["state"] for n in d["nodes"] if n["node"]=="vm-serial"][0])'; }
watch_until() { # watch_until STATE SECONDS CONSOLE
  state=""
  for i in $(seq $(($2 / 5))); do
    sleep 5
    bold "bootops status   ($((i * 5)) s)"
    status | sed -n '/^NODE/,$p'
    state=$(state_of)
    [ "$state" = "$1" ] || [ "$state" = failed ] && break
  done
  if [ "$state" != "$1" ]; then
    echo "vm-serial is not $1 (state: ${state:-none}); the VM's console:"; tail -30 "$3"; exit 1
  fi
}
watch_until provisioned 600 "$work/console1"
wait "$qemu_pid" 2>/dev/null || true; qemu_pid=""   # the agent rebooted it: QEMU exits (-no-reboot)

bold "the same VM powers on again: the boot plane sends it to its disk; Debian boots, cloud-init runs, reports"
vm 2
watch_until running 600 "$work/console2"
bold "bootops logs vm-serial"
ip netns exec "$lan" "$bootops" logs vm-serial --server http://198.18.0.1:8080
for _ in $(seq 30); do grep -aq "login:" "$work/console2" && break; sleep 2; done
bold "the VM's console"
tr -d '\r' < "$work/console2" | grep -a "bootops: reported\|login:" | tail -3
echo
echo "vm-serial was provisioned from sites/, chosen by its serial number, and runs the installed Debian under the hostname its seed gave."
