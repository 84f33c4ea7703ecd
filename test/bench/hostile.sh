#!/usr/bin/env bash
# bootops under attack from the LAN, side by side with a reference bootops
# built from an older commit (a git worktree) in the same run, one table a
# flood (FLOODS, default all four, in this order), each daemon fresh for
# each flood, under a 1,024 open-files limit. The driver is
# test/bench/hostile; it measures in every flood the daemon's RSS and open
# files (idle → peak) and a probe's answers (median / max, failures).
#
#   lan        against REF (default 18034da: the last commit before the
#              status store held nodes and unknown machines apart). Each
#              daemon serves 20 nodes a simulated fleet provisions first;
#              then test/e2e/lanflood sends 50,000 made-up machines from 50
#              loopback addresses, holds 1,000 idle connections and 200 slow
#              bodies, and a probe asks for a provisioned node's script
#              every second. Bounded in count (IDENTITIES) and time (10 min).
#   report     against AUTH_REF (default 39d03a5: the last commit before the
#              authority rules), as the next two; the attacker is
#              test/bench/hostileflood. The same fleet, installed with
#              cloud-init: 3,600 reports of one provisioned node from 4
#              loopback addresses (its real credential, some claiming
#              another install; a forged one; another node's), while a probe
#              asks for another node's script every 200 ms. Also: the
#              node's earlier events still on its timeline, and its
#              delivery record.
#   challenge  7,200 TPM challenges (check-ins with a simulated TPM and no
#              proof) for a registered node from 4 loopback addresses, with
#              boot tokens of its script, forged ones and none, while a
#              probe from another address each time must get a challenge.
#   lease      20,000 DHCPv4 REQUESTs at 2,000/s from made-up MACs that
#              never sent a DISCOVER, naming the pool's addresses, against a
#              daemon in reservation mode (the demo repository of sites/,
#              adapted: pool 198.18.2.100-199, node vm-mac reserved
#              198.18.2.10), over a veth pair between two network
#              namespaces (198.18.2.0/24; removed on exit), while a probe
#              DISCOVERs as vm-mac every 200 ms. ACKs and NAKs counted on
#              the wire.
# Traffic stays on 127.0.0.0/8 or inside those namespaces; each flood is
# bounded in count and in time (at most 60 s but lan's). Root (network
# namespaces; hostileflood needs cgo for the TPM simulator). About 10 min
# with lan, 2 without. The tables go to test/bench/results/hostile.md.
#
#   bash test/bench/hostile.sh
#   FLOODS=report,challenge,lease bash test/bench/hostile.sh
#   REF=HEAD~1 AUTH_REF=HEAD~1 IDENTITIES=20000 bash test/bench/hostile.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ref=$(git rev-parse --short "${REF:-18034da}")
aref=$(git rev-parse --short "${AUTH_REF:-39d03a5}")
floods=${FLOODS:-lan,report,challenge,lease}
results=test/bench/results
mkdir -p "$results"
bash test/deps.sh iproute2 util-linux
work=$(mktemp -d); srv=bo-hsrv-$$; cli=bo-hcli-$$
cleanup() {
  set +e
  ip netns del $srv 2>/dev/null; ip netns del $cli 2>/dev/null
  for w in "$work"/ref-*; do [ -d "$w" ] && git worktree remove --force "$w"; done
  rm -rf "$work"
}
trap cleanup EXIT
has() { [[ ,$floods, == *,$1,* ]]; }
go build -o "$work/bootops" ./cmd/bootops
go build -o "$work/lanflood" ./test/e2e/lanflood
go build -o "$work/hostileflood" ./test/bench/hostileflood
go build -o "$work/hostile" ./test/bench/hostile
reference() { # COMMIT: build it once, in a worktree
  [ -x "$work/bootops-$1" ] && return
  git worktree add --detach "$work/ref-$1" "$1" >/dev/null
  (cd "$work/ref-$1" && go build -o "$work/bootops-$1" ./cmd/bootops)
}
has lan && reference "$ref"
has report || has challenge || has lease && reference "$aref"
if has lease; then
  # The demo repository, in reservation mode on the bench's link (the
  # addresses test/bench/hostile expects).
  repo=$work/lease-repo
  mkdir -p "$repo"; cp -r sites/. "$repo"
  sed -i 's/serverAddress: 198.18.0.1/serverAddress: 198.18.2.1/; s/interface: br0/interface: vsrv/' "$repo/sites/lab/site.yaml"
  sed -i 's|dhcp: proxy|dhcp: reservation\n  subnet: 198.18.2.0/24\n  pool: {start: 198.18.2.100, end: 198.18.2.199}|' "$repo/sites/lab/site.yaml"
  echo "ip: 198.18.2.10" >> "$repo/sites/lab/nodes/vm-mac.yaml"
  echo k > "$repo/microos/vmlinuz"; echo i > "$repo/microos/initrd.img"
  ip netns add $srv; ip netns add $cli
  ip -n $srv link add vsrv type veth peer name vcli netns $cli
  ip -n $srv addr add 198.18.2.1/24 dev vsrv; ip -n $srv link set vsrv up; ip -n $srv link set lo up
  ip -n $cli addr add 198.18.2.2/24 dev vcli; ip -n $cli link set vcli up; ip -n $cli link set lo up
fi
{
  about="bootops $(git rev-parse --short HEAD)"
  git diff --quiet HEAD -- || about+=" (with uncommitted changes)"
  has lan && about+=", the reference $ref for the lan flood"
  has report || has challenge || has lease && about+=", the reference $aref for the report, challenge and lease floods"
  echo "$about; $(nproc) cores; \`FLOODS=$floods bash test/bench/hostile.sh\`"
  echo
  "$work/hostile" -floods "$floods" -bootops "$work/bootops" \
    -reference "$work/bootops-$ref" -reference-name "bootops $ref (reference)" \
    -authority-reference "$work/bootops-$aref" -authority-reference-name "bootops $aref (reference)" \
    -flood "$work/lanflood" -identities "${IDENTITIES:-50000}" \
    -attacker "$work/hostileflood" -netns "$srv,$cli" -lease-repo "${repo:-}"
} | tee "$results/hostile.md"
