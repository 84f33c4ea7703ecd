package microos

import (
	"fmt"
	"strings"
)

// ConsolePrefix starts every line /init prints, so a test or an operator
// can pick the Micro-OS's steps out of the kernel's console.
const ConsolePrefix = "bootops-microos: "

// initTemplate is the image's /init; initScript puts the module lines where
// @MODULES@ stands.
//
// It runs as PID 1 and must never exit (the kernel panics then): every way
// out ends in poweroff, or in a shell loop with bootops.debug.
const initTemplate = `#!/bin/busybox sh
# /init of the bootops Micro-OS, written by 'bootops microos build': load the
# kernel modules, get an address by DHCP (or, when the server is IPv6, by
# SLAAC or DHCPv6), run bootops-agent.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
/bin/busybox mount -t proc proc /proc
# --install finds busybox through /proc/self/exe.
/bin/busybox --install -s
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

say() { echo "bootops-microos: $*"; }

debug=
ipv6=
for w in $(cat /proc/cmdline); do
	case "$w" in
	bootops.debug|bootops.debug=1|bootops.debug=true|bootops.debug=yes) debug=1 ;;
	# The server is an IPv6 address (http://[2001:db8::1]:8080), or the
	# command line says so: the network comes up over IPv6.
	bootops.server=http://\[*|bootops.server=https://\[*|bootops.ipv6=1) ipv6=1 ;;
	esac
done

# fail says why the Micro-OS stops, then powers off, or with bootops.debug
# on the kernel command line opens a shell on the console instead.
fail() {
	say "$*"
	if [ -n "$debug" ]; then
		say "bootops.debug is set: starting a shell (poweroff -f to stop)"
		while :; do
			setsid cttyhack sh
			sleep 1
		done
	fi
	say "powering off in 10 s (add bootops.debug to the kernel command line for a shell)"
	sleep 10
	poweroff -f
	while :; do sleep 3600; done
}

say "starting on kernel $(uname -r)"

loaded=0
failed=0
absent=
# load inserts one module; one already in the kernel counts as loaded, one
# whose device or firmware is absent (efivarfs on BIOS) is only listed.
load() {
	if out=$(insmod "$1" 2>&1); then
		loaded=$((loaded + 1))
		return
	fi
	case "$out" in
	*"File exists"*) loaded=$((loaded + 1)) ;;
	*"No such device"*) m=${1##*/}; absent="$absent ${m%.ko}" ;;
	*) failed=$((failed + 1)); say "insmod $1: $out" ;;
	esac
}
@MODULES@
summary="loaded $loaded modules"
[ "$failed" -gt 0 ] && summary="$summary, $failed failed"
[ -n "$absent" ] && summary="$summary (no device for:$absent)"
say "$summary"
# The agent reads the SecureBoot variable: how the machine booted.
[ -d /sys/firmware/efi/efivars ] && mount -t efivarfs efivarfs /sys/firmware/efi/efivars 2>/dev/null
# The firmware's TPM event log (tpm0/binary_bios_measurements), which the
# agent sends with a quote of the boot.
mount -t securityfs securityfs /sys/kernel/security 2>/dev/null

# ifaces lists the Ethernet interfaces (ARPHRD_ETHER), lo and tunnels left out.
ifaces() {
	for d in /sys/class/net/*; do
		[ "$(cat "$d/type" 2>/dev/null)" = 1 ] && echo "${d##*/}"
	done
}

i=0
while [ -z "$(ifaces)" ] && [ "$i" -lt 10 ]; do
	sleep 1
	i=$((i + 1))
done
ip link set lo up
all=$(echo $(ifaces))
[ -n "$all" ] || fail "no network interface: is the NIC's driver among the modules?"
say "interfaces: $all"
# Up at once, so links negotiate while DHCP tries the first one.
for n in $all; do ip link set "$n" up; done

# global6 prints the interfaces' global IPv6 addresses that are usable
# (done with duplicate address detection).
global6() {
	for n in $all; do
		ip -6 addr show dev "$n" 2>/dev/null | grep 'scope global' | grep -v tentative | while read -r _ a _; do echo "$n $a"; done
	done
}

lease=
# A static network from Git (a node's network: on its boot media, for a
# link with no DHCP): /etc/bootops/network sets BOOTOPS_NET_ADDRESS (with
# its prefix length), _GATEWAY, _DNS, _VLAN and _MAC (which NIC).
if [ -f /etc/bootops/network ]; then
	. /etc/bootops/network
	n=
	if [ -n "$BOOTOPS_NET_MAC" ]; then
		for d in $all; do
			[ "$(cat "/sys/class/net/$d/address")" = "$BOOTOPS_NET_MAC" ] && n=$d
		done
		[ -n "$n" ] || fail "static network: no interface has the MAC $BOOTOPS_NET_MAC (interfaces: $all)"
	else
		# The first interface with a link, waited for 10 s.
		i=0
		while [ -z "$n" ] && [ "$i" -lt 10 ]; do
			for d in $all; do
				[ -z "$n" ] && [ "$(cat "/sys/class/net/$d/carrier" 2>/dev/null)" = 1 ] && n=$d
			done
			[ -z "$n" ] && sleep 1
			i=$((i + 1))
		done
		n=${n:-${all%% *}}
	fi
	if [ -n "$BOOTOPS_NET_VLAN" ]; then
		ip link add link "$n" name "$n.$BOOTOPS_NET_VLAN" type vlan id "$BOOTOPS_NET_VLAN" || fail "static network: VLAN $BOOTOPS_NET_VLAN on $n: is 8021q among the modules?"
		n=$n.$BOOTOPS_NET_VLAN
		ip link set "$n" up
	fi
	ip addr add "$BOOTOPS_NET_ADDRESS" dev "$n" || fail "static network: cannot set $BOOTOPS_NET_ADDRESS on $n"
	if [ -n "$BOOTOPS_NET_GATEWAY" ]; then
		ip route add default via "$BOOTOPS_NET_GATEWAY" dev "$n" || fail "static network: no route via $BOOTOPS_NET_GATEWAY on $n"
	fi
	: >/etc/resolv.conf
	for d in $BOOTOPS_NET_DNS; do echo "nameserver $d" >>/etc/resolv.conf; done
	mkdir -p /run/bootops-microos
	echo "static $BOOTOPS_NET_ADDRESS${BOOTOPS_NET_GATEWAY:+ via $BOOTOPS_NET_GATEWAY}${BOOTOPS_NET_VLAN:+ vlan $BOOTOPS_NET_VLAN}" >"/run/bootops-microos/$n"
	lease=$n
fi
if [ -z "$lease" ] && [ -n "$ipv6" ]; then
	# SLAAC: the kernel takes the prefix of the link's router
	# advertisements. A managed link (the RA's M flag, no autonomous
	# prefix) gives addresses by DHCPv6 only: busybox has no DHCPv6
	# client, the agent asks (bootops-agent dhcp6) when no SLAAC address
	# came in 8 s, and again every 10 s.
	for n in $all; do
		echo 1 >"/proc/sys/net/ipv6/conf/$n/accept_ra"
		echo 1 >"/proc/sys/net/ipv6/conf/$n/autoconf"
	done
	i=0
	while [ -z "$(global6)" ]; do
		[ "$i" -ge 45 ] && fail "no global IPv6 address on $all after $i s: neither SLAAC (an autonomous prefix in the router's advertisements) nor DHCPv6 gave one"
		[ $((i % 5)) = 0 ] && say "waiting for a global IPv6 address (router advertisement) on $all"
		if [ "$i" -ge 8 ] && [ $((i % 10)) = 8 ]; then
			for n in $all; do
				if a=$(/bin/bootops-agent dhcp6 "$n"); then
					# /64 as dhclient does: DHCPv6 says nothing of the prefix.
					ip -6 addr add "$a/64" dev "$n" && say "dhcpv6 on $n: $a" && break
				fi
			done
		fi
		sleep 1
		i=$((i + 1))
	done
	say "ipv6: $(echo $(global6))"
	lease=ipv6
	# An IPv4 address too when the link has DHCP (a dual-stack site): one
	# quick try, not needed.
	for n in $all; do
		udhcpc -i "$n" -n -t 2 -T 1 -s /etc/udhcpc.script >/dev/null 2>&1 && say "$n $(cat "/run/bootops-microos/$n")" && break
	done
fi
# udhcpc stays in the background once bound and renews its lease.
round=1
while [ -z "$lease" ]; do
	for n in $all; do
		say "dhcp on $n"
		if udhcpc -i "$n" -n -t 5 -T 2 -s /etc/udhcpc.script; then
			lease=$n
			break
		fi
	done
	[ -n "$lease" ] && break
	[ "$round" -ge 5 ] && fail "no DHCP lease on $all after $round rounds"
	say "no DHCP lease yet (round $round of 5)"
	round=$((round + 1))
	sleep 2
done
[ "$lease" = ipv6 ] || say "$lease $(cat "/run/bootops-microos/$lease")"

say "starting bootops-agent"
/bin/bootops-agent
fail "bootops-agent exited with status $?"
`

// initScript gives /init for modules in load order, as they are named in
// the image (lib/modules/<name>.ko).
func initScript(modules []string) []byte {
	var b strings.Builder
	for _, m := range modules {
		fmt.Fprintf(&b, "load /lib/modules/%s.ko\n", m)
	}
	return []byte(strings.Replace(initTemplate, "@MODULES@\n", b.String(), 1))
}

// udhcpcScript configures what udhcpc leased: busybox udhcpc runs it with
// $1 = deconfig, bound, renew, leasefail or nak and the lease in the
// environment ($interface, $ip, $mask as a prefix length, $router, $dns,
// $domain, $broadcast). /init reads the summary it leaves in /run. udhcpc
// stays in the background once bound (no -q) and renews the lease: a
// machine may wait in the Micro-OS for hours (held until its Node is
// committed), the lease may be an hour.
const udhcpcScript = `#!/bin/busybox sh
case "$1" in
deconfig)
	ip -4 addr flush dev "$interface"
	ip link set "$interface" up
	;;
bound|renew)
	# A renewal of the address in use leaves it, and its connections, be.
	if [ "$1" = bound ] || ! ip -4 addr show dev "$interface" | grep -q "inet $ip/"; then
		ip -4 addr flush dev "$interface"
		ip addr add "$ip/${mask:-24}" ${broadcast:+broadcast "$broadcast"} dev "$interface"
		for r in $router; do
			ip route add default via "$r" dev "$interface" && break
		done
	fi
	{
		[ -n "$domain" ] && echo "search $domain"
		for d in $dns; do echo "nameserver $d"; done
	} >/etc/resolv.conf
	mkdir -p /run/bootops-microos
	echo "$ip mask ${mask:-24}${router:+ router ${router%% *}}${dns:+ dns $dns}" >"/run/bootops-microos/$interface"
	;;
esac
exit 0
`
