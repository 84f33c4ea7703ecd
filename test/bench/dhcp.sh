#!/usr/bin/env bash
# DHCP benchmark: perfdhcp (Debian kea-admin) with PXE options 60/93/94 and
# -i (DISCOVER → OFFER only), 1,000 distinct clients, against bootops in
# proxy mode and against dnsmasq in proxy mode, in the same run, over a veth
# pair between two network namespaces (198.18.1.0/24; removed afterwards).
#
#   bash test/bench/dhcp.sh [RATE…]     (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash test/deps.sh kea-admin dnsmasq-base iproute2
rates=("${@:-5000 10000 20000}")
[ $# -gt 0 ] && rates=("$@") || rates=(5000 10000 20000)
work=$(mktemp -d); srv=bo-bsrv-$$; cli=bo-bcli-$$
cleanup() { set +e; kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; ip netns del $srv; ip netns del $cli; rm -rf "$work"; }
trap cleanup EXIT
go build -o "$work/bootops" ./cmd/bootops
mkdir -p "$work/repo"; cp -r sites/. "$work/repo"
sed -i 's/serverAddress: 198.18.0.1/serverAddress: 198.18.1.1/; s/interface: br0/interface: vsrv/' "$work/repo/sites/lab/site.yaml"
echo k > "$work/repo/microos/vmlinuz"; echo i > "$work/repo/microos/initrd.img"
ip netns add $srv; ip netns add $cli
ip -n $srv link add vsrv type veth peer name vcli netns $cli
ip -n $srv addr add 198.18.1.1/24 dev vsrv; ip -n $srv link set vsrv up; ip -n $srv link set lo up
ip -n $cli addr add 198.18.1.2/24 dev vcli; ip -n $cli link set vcli up; ip -n $cli link set lo up
# PXEClient:Arch:00000:UNDI:002001, arch 0 (BIOS), UNDI 2.1
pxe=(-o 60,505845436c69656e743a417263683a30303030303a554e44493a303032303031 -o 93,0000 -o 94,010201)
bench() { # NAME RATE
  local out
  out=$(ip netns exec $cli perfdhcp -4 -l vcli -i -r "$2" -R 1000 -p 10 "${pxe[@]}" 2>&1 || true)
  local sent recv drops rate
  sent=$(echo "$out" | awk '/sent packets:/ {print $3; exit}')
  recv=$(echo "$out" | awk '/received packets:/ {print $3; exit}')
  drops=$(echo "$out" | awk '/drops:/ {print $2; exit}')
  rate=$(echo "$out" | awk '/^Rate:/ {print $2; exit}')
  printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "${sent:-?}" "${recv:-?}" "${drops:-?}" "${rate:-?}"
  echo "$out" > "$work/perfdhcp-$1-$2.txt"
}
echo "| server | target rate/s | DISCOVERs sent | OFFERs received | drops | rate (exchanges/s) |"
echo "| --- | --- | --- | --- | --- | --- |"
ip netns exec $srv dnsmasq --keep-in-foreground --port=0 --interface=vsrv --bind-interfaces \
  --dhcp-range=198.18.1.0,proxy --pxe-service=x86PC,"bootops bench",undionly --log-facility=/dev/null & dns=$!
sleep 1
for r in "${rates[@]}"; do bench dnsmasq "$r"; done
kill $dns; wait $dns 2>/dev/null || true
ip netns exec $srv "$work/bootops" serve --source "$work/repo" --state-dir "$work/state" --dhcp proxy --interface vsrv \
  --http-addr 198.18.1.1:8080 --tftp-addr "" --log-format text --pprof-addr 127.0.0.1:6060 2>"$work/bootops.log" &
sleep 2
prof=
for r in "${rates[@]}"; do
  # BENCH_CPUPROFILE=FILE: the daemon's CPU profile during the last rate.
  if [ -n "${BENCH_CPUPROFILE:-}" ] && [ "$r" = "${rates[-1]}" ]; then
    ip netns exec $srv curl -s -o "$BENCH_CPUPROFILE" "http://127.0.0.1:6060/debug/pprof/profile?seconds=8" & prof=$!
  fi
  bench bootops "$r"
done
[ -z "$prof" ] || wait $prof
