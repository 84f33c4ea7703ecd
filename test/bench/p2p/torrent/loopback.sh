#!/usr/bin/env bash
# Loopback run of p2ptorrent: one seed and N getters on 127.0.0.1, all started
# at once, no shaping. Every process runs under /usr/bin/time -v.
#
#   loopback.sh BIN WORKDIR [SIZE_MIB] [GETTERS]
#
# BIN is a built p2ptorrent (build it outside the repo, e.g. /tmp/p2ptorrent).
# WORKDIR is created and left for inspection; remove it afterwards.
# Prints the JSON lines, time -v excerpts and cmp results. Bounded: at most
# 300 s waiting for downloads, then everything is sent SIGTERM.
set -euo pipefail

bin=${1:?binary}
dir=${2:?work dir}
size_mib=${3:-256}
getters=${4:-4}
base_port=47200 # seed; getter i listens on base_port+i

mkdir -p "$dir"
cd "$dir"
[ -f src.raw ] || head -c "$((size_mib << 20))" /dev/urandom >src.raw
"$bin" info -in src.raw -piece 4194304 -o image.torrent

addr() { echo "127.0.0.1:$((base_port + $1))"; }

# peers_for i: the seed first, then every other getter.
peers_for() {
	local list i
	list=$(addr 0)
	for ((i = 1; i <= getters; i++)); do
		[ "$i" -eq "$1" ] || list+=",$(addr "$i")"
	done
	echo "$list"
}

pids=()
/usr/bin/time -v -o seed.time "$bin" seed -torrent image.torrent -data src.raw \
	-listen "$(addr 0)" >seed.out 2>seed.err &
seed_pid=$!
for ((i = 1; i <= getters; i++)); do
	rm -f "g$i.img" "g$i.done"
	/usr/bin/time -v -o "g$i.time" "$bin" get -torrent image.torrent -out "g$i.img" \
		-listen "$(addr "$i")" -peers "$(peers_for "$i")" -linger 60s -done "g$i.done" \
		>"g$i.out" 2>"g$i.err" &
	pids+=($!)
done

# Wait (bounded) for every getter to finish downloading, or to exit.
for ((t = 0; t < 3000; t++)); do
	n=0
	for ((i = 1; i <= getters; i++)); do
		[ -f "g$i.done" ] && n=$((n + 1))
	done
	[ "$n" -eq "$getters" ] && break
	alive=0
	for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
	[ "$alive" -eq 1 ] || break
	sleep 0.1
done

# stop_child PID: SIGTERM the p2ptorrent that /usr/bin/time PID runs (time
# does not forward signals, so signal its child by its own pid).
stop_child() {
	local c
	for c in $(pgrep -P "$1"); do kill -TERM "$c" 2>/dev/null || true; done
}

# Stop the getters (they would linger 60 s), then the seed.
for p in "${pids[@]}"; do stop_child "$p"; done
for p in "${pids[@]}"; do wait "$p" || echo "getter pid $p exited $?"; done
stop_child "$seed_pid"
wait "$seed_pid" || echo "seed exited $?"

echo "== results"
cat seed.out
for ((i = 1; i <= getters; i++)); do
	echo "g$i: $(tr '\n' ' ' <"g$i.out")"
done
echo "== verification"
for ((i = 1; i <= getters; i++)); do
	if cmp -s src.raw "g$i.img"; then echo "g$i.img identical"; else echo "g$i.img DIFFERS"; fi
done
echo "== /usr/bin/time -v"
for f in seed.time g*.time; do
	printf '%s: ' "$f"
	grep -E 'Maximum resident|User time|System time|Elapsed|Percent of CPU' "$f" |
		sed 's/^\s*//' | tr '\n' ';'
	echo
done
echo "== stderr (last lines)"
for f in seed.err g*.err; do echo "-- $f"; tail -n 5 "$f"; done
