#!/usr/bin/env bash
# make demo: what works end to end today. The compiler issue is done; the
# boot plane (DHCP/TFTP/HTTP and a real PXE VM) comes with its own issue.
# Until then the demo validates, compiles, renders and explains the demo
# repository in sites/.
set -euo pipefail
cd "$(dirname "$0")/.."
bootops=./bin/bootops
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# The Micro-OS files are build output (make microos will build real ones);
# until then, mark them plainly as placeholders so the repo validates.
for f in sites/microos/vmlinuz sites/microos/initrd.img; do
  [ -e "$f" ] || echo "placeholder: the boot-plane issue builds the real Micro-OS here" > "$f"
done

step "bootops validate sites"
$bootops validate sites

step "bootops compile sites -o out/demo"
$bootops compile sites -o out/demo
find out/demo -type f | sort | head -20

step "bootops render sites --node vm-serial            (the iPXE script)"
$bootops render sites --node vm-serial

step "bootops render sites --node vm-serial --what cloud-init"
$bootops render sites --node vm-serial --what cloud-init

step "bootops explain: a machine with serial DEMO-0001"
$bootops explain sites --serial DEMO-0001 --mac 52:54:00:12:34:56

step "bootops explain: serial of one node, MAC of another (refused)"
$bootops explain sites --serial DEMO-0001 --mac 52:54:00:de:00:03 || echo "(exit $?: refused)"

step "bootops explain: a machine nobody registered"
$bootops explain sites --uuid 0f0e0d0c-0b0a-0908-0706-050403020100

step "a broken change is caught with its position"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r sites/. "$tmp"
sed -i 's/serial: DEMO-0001/serial: DEMO 0001/' "$tmp/sites/lab/nodes/vm-serial.yaml"
printf 'apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: vm-copy\nidentity:\n  mac: 52-54-00-DE-00-03\nprofile: demo-dsk\n' > "$tmp/sites/lab/nodes/vm-copy.yaml"
$bootops validate "$tmp" || echo "(exit $?: invalid)"
