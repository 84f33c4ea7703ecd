#!/usr/bin/env bash
# DHCPv6 benchmark: perfdhcp -6 (Debian kea-admin) with -i (SOLICIT →
# ADVERTISE only), 1,000 distinct clients (DUID-LL, as firmware sends them)
# carrying UEFI PXE options (vendor class 16 "PXEClient:Arch:00007…",
# architecture 61 = 7), against Kea's DHCPv6 server (kea-dhcp6-server,
# single-threaded as Debian configures it, then with 2 threads) and against
# bootops's DHCPv6 server (boot/dhcp6, reservation mode, run alone by
# test/bench/dhcp6), in the same run, over a veth pair between two network
# namespaces (2001:db8:7::/64; removed afterwards). Every server hands out
# addresses from the same pool and the same boot file URL.
#
#   bash test/bench/dhcp6.sh [RATE…]     (root)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash test/deps.sh kea-admin kea-dhcp6-server iproute2
[ $# -gt 0 ] && rates=("$@") || rates=(5000 10000 20000)
work=$(mktemp -d); srv=bo-b6srv-$$; cli=bo-b6cli-$$
cleanup() { set +e; [ -z "${BENCH_KEEP:-}" ] || cp "$work"/*.txt "$work"/*.log "$BENCH_KEEP/"; kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; ip netns del $srv; ip netns del $cli; rm -rf "$work"; }
trap cleanup EXIT
# BENCH_KEEP=DIR: keep perfdhcp's and the servers' output there.
go build -o "$work/dhcp6" ./test/bench/dhcp6
ip netns add $srv; ip netns add $cli
for ns in $srv $cli; do
  ip netns exec $ns sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
  ip -n $ns link set lo up
done
ip -n $srv link add vsrv address 52:54:00:b6:00:01 type veth peer name vcli address 52:54:00:b6:00:02 netns $cli
ip -n $srv addr add 2001:db8:7::1/64 dev vsrv nodad; ip -n $srv link set vsrv up
ip -n $cli link set vcli up
sleep 1
pool=2001:db8:7::1000-2001:db8:7::ffff
url='tftp://[2001:db8:7::1]/snponly.efi'  # what bootops offers x86 UEFI over IPv6
# Enterprise 343, "PXEClient:Arch:00007:UNDI:003016" (32 bytes); arch 7.
pxe=(-o 16,000001570020$(printf 'PXEClient:Arch:00007:UNDI:003016' | od -An -tx1 | tr -d ' \n') -o 61,0007)
bench() { # NAME RATE
  local out
  out=$(ip netns exec $cli perfdhcp -6 -l vcli -i -r "$2" -R 1000 -p 10 -b duid=0003000152540000b600 "${pxe[@]}" 2>&1 || true)
  local sent recv drops rate
  sent=$(echo "$out" | awk '/sent packets:/ {print $3; exit}')
  recv=$(echo "$out" | awk '/received packets:/ {print $3; exit}')
  drops=$(echo "$out" | awk '/drops:/ {print $2; exit}')
  rate=$(echo "$out" | awk '/^Rate:/ {print $2; exit}')
  printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "${sent:-?}" "${recv:-?}" "${drops:-?}" "${rate:-?}"
  echo "$out" > "$work/perfdhcp-$1-$2.txt"
}
kea() { # THREADS
  local mt='"multi-threading": {"enable-multi-threading": false},'
  [ "$1" -gt 1 ] && mt='"multi-threading": {"enable-multi-threading": true, "thread-pool-size": '"$1"', "packet-queue-size": 64},'
  cat > "$work/kea.json" <<EOF
{"Dhcp6": {
  "interfaces-config": {"interfaces": ["vsrv"]},
  "server-id": {"type": "LL", "persist": false},
  "lease-database": {"type": "memfile", "persist": true, "name": "$work/kea-leases6.csv", "lfc-interval": 0},
  $mt
  "preferred-lifetime": 3600, "valid-lifetime": 3600,
  "subnet6": [{"id": 1, "subnet": "2001:db8:7::/64", "interface": "vsrv",
    "pools": [{"pool": "$pool"}],
    "option-data": [{"name": "bootfile-url", "data": "$url", "always-send": true}]}],
  "loggers": [{"name": "kea-dhcp6", "severity": "WARN", "output_options": [{"output": "$work/kea.log"}]}]
}}
EOF
  KEA_PIDFILE_DIR=$work KEA_LOCKFILE_DIR=$work ip netns exec $srv kea-dhcp6 -c "$work/kea.json" 2>>"$work/kea.log" &
}
echo "| server | target rate/s | SOLICITs sent | ADVERTISEs received | drops | rate (exchanges/s) |"
echo "| --- | --- | --- | --- | --- | --- |"
for threads in 1 2; do
  kea $threads; k=$!
  sleep 2
  for r in "${rates[@]}"; do bench "kea-${threads}t" "$r"; done
  kill $k; wait $k 2>/dev/null || true
done
ip netns exec $srv "$work/dhcp6" -i vsrv -addr 2001:db8:7::1 -pool "$pool" -state "$work/state" 2>"$work/bootops.log" & b=$!
sleep 1
for r in "${rates[@]}"; do bench bootops "$r"; done
kill -INT $b; wait $b 2>/dev/null || true
if grep -q . "$work/bootops.log"; then echo; echo "bootops:"; cat "$work/bootops.log"; fi
