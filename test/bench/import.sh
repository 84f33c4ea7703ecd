#!/usr/bin/env bash
# `bootops import csv` benchmark: a 10,000-row spreadsheet in EIM's
# bulk-import layout (+ MAC) into a copy of examples/warehouse, every row
# validated against the repository and written as a Node file. Reference,
# in the same run: awk splitting the same CSV into 10,000 files of the same
# shape with no checks at all — the floor of writing that many files.
# Target: ≤ 2 s for 10,000 rows.
#
#   bash test/bench/import.sh [ROWS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rows=${1:-10000}
runs=${2:-5}
bash test/deps.sh time gawk
go build -o bin/bootops ./cmd/bootops
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
csv=$work/delivery.csv
{
  echo "Serial,UUID,OSProfile,Site,Secure,RemoteUser,Metadata,MAC"
  awk -v n="$rows" 'BEGIN { for (i = 0; i < n; i++) printf "SN-BENCH-%06d,4c4c4544-0042-3710-8030-%012x,%s,warehouse,false,,rack=r%d&row=%d,52:54:01:%02x:%02x:%02x\n", i, i, (i % 3 ? "microvisor" : "ubuntu-24-04"), i % 40, i % 7, int(i / 65536) % 256, int(i / 256) % 256, i % 256 }'
} >"$csv"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
fresh() { rm -rf "$work/repo" && cp -r examples/warehouse "$work/repo"; }
time_runs() { # CMD…: wall seconds and peak RSS (KB) of each run, on a fresh copy
  for _ in $(seq "$runs"); do
    fresh
    cat "$csv" >/dev/null
    /usr/bin/time -f "%e %M" -o "$work/t" "$@" >"$work/out" 2>"$work/err" || { cat "$work/err"; exit 1; }
    tail -1 "$work/t"
  done
}
split() { # the reference: one file per row, no validation
  mkdir -p "$work/repo/sites/warehouse/nodes"
  awk -F, -v dir="$work/repo/sites/warehouse/nodes" 'NR > 1 {
    f = dir "/" tolower($1) ".yaml"
    printf "apiVersion: bootops.dev/v1alpha1\nkind: Node\nname: %s\nidentity:\n  serial: %s\n  uuid: %s\n  mac: %s\nprofile: %s\n", tolower($1), $1, $2, $8, $3 > f
    close(f)
  }' "$csv"
}
time_runs bash -c "$(declare -f split); work=$work csv=$csv split" >"$work/ref"
time_runs bin/bootops import csv "$csv" --site warehouse --repo "$work/repo" >"$work/imp"
tail -1 "$work/out"
test "$(ls "$work/repo/sites/warehouse/nodes" | wc -l)" -eq $((rows + 20))
echo "$rows rows, $runs runs each, median (peak RSS of that run's max)"
echo "| command | seconds | peak RSS MB |"
echo "| --- | --- | --- |"
echo "| awk, one file per row, no checks (reference) | $(cut -d' ' -f1 "$work/ref" | median) | $(( $(cut -d' ' -f2 "$work/ref" | sort -n | tail -1) / 1024 )) |"
echo "| bootops import csv | $(cut -d' ' -f1 "$work/imp" | median) | $(( $(cut -d' ' -f2 "$work/imp" | sort -n | tail -1) / 1024 )) |"
