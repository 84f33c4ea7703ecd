#!/usr/bin/env bash
# Compiler benchmark: bootops validate / compile on a generated 10,000-node,
# 50-site repository, side by side with `cue vet -d '#Node'` (the reference:
# CUE's own CLI checking the same node files against the same schema), in the
# same run. Prints a Markdown table; raw numbers go to test/bench/results/.
#
#   make bench                 (or: bash test/bench/compile.sh [RUNS])
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
results=test/bench/results
mkdir -p "$results" .cache/bin

bash test/deps.sh time
cue=.cache/bin/cue
if ! "$cue" version 2>/dev/null | grep -q v0.17.1; then
  GOBIN="$PWD/.cache/bin" go install cuelang.org/go/cmd/cue@v0.17.1
fi
go build -o bin/bootops ./cmd/bootops

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fleet="$work/fleet"
go run ./test/fleet/gen -sites 50 -nodes 10000 -o "$fleet" >/dev/null
nodes=("$fleet"/sites/*/nodes/*.yaml)
echo "repository: ${#nodes[@]} node files, 50 sites; $runs runs each; $(nproc) cores; $(go version | cut -d' ' -f3); cue $("$cue" version | head -1 | cut -d' ' -f3)"

# This VM hands free memory back to its host, page cache included, so files
# read a minute ago may come from disk again. Every run starts with the
# repository's files read once (both tools alike): the figures are the
# tools' work, not the virtual disk's.
warm() { find "$fleet" -type f -exec cat {} + >/dev/null; }

# time_cmd NAME CMD…: wall seconds and peak RSS (MB) of each run.
time_cmd() {
  local name=$1; shift
  local walls=() rss=()
  for _ in $(seq "$runs"); do
    warm
    /usr/bin/time -f "%e %M" -o "$work/t" "$@" >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
    read -r w m < "$work/t"
    walls+=("$w"); rss+=("$m")
  done
  printf '%s\n' "${walls[@]}" | sort -n > "$work/w"
  printf '%s\n' "${rss[@]}" | sort -n > "$work/m"
  local med min maxrss
  med=$(sed -n "$(( (runs + 1) / 2 ))p" "$work/w")
  min=$(head -1 "$work/w")
  maxrss=$(( $(tail -1 "$work/m") / 1024 ))
  printf '| %s | %s | %s | %s |\n' "$name" "$med" "$min" "$maxrss" | tee -a "$results/compile.md"
  echo "$name ${walls[*]}" >> "$results/compile.raw"
}

: > "$results/compile.md"; : > "$results/compile.raw"
echo
echo "| command | median wall (s) | best wall (s) | peak RSS (MB) |"
echo "| --- | --- | --- | --- |"
time_cmd "cue vet -d '#Node' schema/bootops.cue <10,000 node files>" "$cue" vet -d '#Node' schema/bootops.cue "${nodes[@]}"
time_cmd "bootops validate <repo>" ./bin/bootops validate "$fleet"
shm=/dev/shm/bootops-bench.$$
time_cmd "bootops compile <repo> -o <tmpfs>" ./bin/bootops compile "$fleet" -o "$shm/out"
# The floor for writing the same 60,000 files and 10,000 folders: copy the
# output tree, on the same tmpfs.
time_cmd "cp -r <that output> <tmpfs> (file-writing floor)" bash -c "rm -rf $shm/copy; cp -r $shm/out $shm/copy"
rm -rf "$shm"

echo
echo "In-process benchmarks (go test -bench):"
go test ./test/bench -run XXX -bench 'CompileCold|RecompileOne' -benchtime 20x -count 3 -benchmem | tee "$results/go-bench.txt" | grep Benchmark
