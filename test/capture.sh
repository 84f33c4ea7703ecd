#!/usr/bin/env bash
# test/capture.sh OUT: boot a BIOS VM (SeaBIOS + QEMU's iPXE ROM) and a UEFI
# VM (OVMF's own PXE, then iPXE) against bootops on a namespace LAN and save
# every DHCP packet they send, as the UDP payloads boot/dhcp's table tests
# replay (OUT/<n>-<port>.bin, in order). Needs root and `make lab-deps`.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: test/capture.sh OUT}
mkdir -p "$out"
go build -o bin/bootops ./cmd/bootops
work=$(mktemp -d); lan=bo-cap-$$; dhcpns=bo-capd-$$
cleanup() { set +e; kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; ip netns del $lan; ip netns del $dhcpns; rm -rf "$work"; }
trap cleanup EXIT
cp -r sites "$work/repo"
cp "$(ls /boot/vmlinuz-* | sort -V | tail -1)" "$work/repo/microos/vmlinuz"
go run ./test/microos -o "$work/repo/microos/initrd.img"
ip netns add $lan; ip netns add $dhcpns
ip -n $lan link set lo up
ip -n $lan link add br0 type bridge; ip -n $lan addr add 198.18.0.1/24 dev br0; ip -n $lan link set br0 up
ip -n $lan link add vdhcp type veth peer name eth0 netns $dhcpns; ip -n $lan link set vdhcp master br0 up
ip -n $dhcpns addr add 198.18.0.2/24 dev eth0; ip -n $dhcpns link set eth0 up
ip netns exec $dhcpns dnsmasq --port=0 --interface=eth0 --bind-interfaces --dhcp-range=198.18.0.100,198.18.0.199,255.255.255.0,10m \
  --dhcp-leasefile="$work/leases" --pid-file="$work/dnsmasq.pid"
ip netns exec $lan tcpdump -i br0 -U -w "$work/dhcp.pcap" 'udp dst port 67 or udp dst port 4011' 2>/dev/null &
ip netns exec $lan ./bin/bootops serve --source "$work/repo" --state-dir "$work/state" --http-addr 198.18.0.1:8080 \
  --tftp-addr 198.18.0.1:69 --interface br0 --log-format text >"$work/bootops.log" 2>&1 &
sleep 2
for vm in bios uefi; do
  ip -n $lan tuntap add dev tap-$vm mode tap; ip -n $lan link set tap-$vm master br0 up
  fw=() nic="" smbios="type=1,serial=DEMO-0001"
  if [ $vm = uefi ]; then
    cp /usr/share/OVMF/OVMF_VARS_4M.fd "$work/vars.fd"
    fw=(-drive if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd -drive if=pflash,format=raw,file="$work/vars.fd")
    nic=",romfile=" smbios="type=1,uuid=01020304-0506-0708-090a-0b0c0d0e0f10"
  fi
  ip netns exec $lan qemu-system-x86_64 -accel tcg -m 512 -nographic -no-reboot -monitor none -serial file:"$work/$vm.console" \
    "${fw[@]}" -netdev tap,id=n0,ifname=tap-$vm,script=no,downscript=no -device virtio-net-pci,netdev=n0,mac=52:54:00:ca:00:0${#vm}$nic \
    -boot n -smbios "$smbios" >/dev/null 2>&1 &
  for _ in $(seq 120); do grep -q BOOTOPS-MICROOS "$work/$vm.console" 2>/dev/null && break; sleep 1; done
  grep BOOTOPS-MICROOS "$work/$vm.console"
done
sleep 1
go run ./test/pcapsplit "$work/dhcp.pcap" "$out"
