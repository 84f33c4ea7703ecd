#!/usr/bin/env bash
# `bootops diff` benchmark: two revisions of the generated 10,000-node,
# 50-site repository, 100 nodes changed between them, both read straight
# from the Git object store. Reference, in the same run: a cold compile of
# one revision (`bootops explain` compiles and renders the whole Plan, then
# decides one machine). Target: diff ≤ 2× the cold compile.
#
#   bash test/bench/diff.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
bash test/deps.sh git time
go build -o bin/bootops ./cmd/bootops
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fleet=$work/fleet
go run ./test/fleet/gen -sites 50 -nodes 10000 -o "$fleet" >/dev/null
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid
git -C "$fleet" init -q -b main && git -C "$fleet" add -A && git -C "$fleet" commit -q -m base
# 100 nodes change: a label each.
for f in $(find "$fleet/sites" -name 'node-*.yaml' | sort | sed -n 1,100p); do
  printf '  bench: changed\n' >> "$f"
done
git -C "$fleet" commit -q -am "100 nodes"
warm() { find "$fleet" -type f -exec cat {} + >/dev/null; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_runs() { # CMD…: wall seconds of each run
  for _ in $(seq "$runs"); do
    warm
    /usr/bin/time -f "%e" -o "$work/t" "$@" >"$work/out" 2>"$work/err" || { [ $? = 2 ] || { cat "$work/err"; exit 1; }; }
    tail -1 "$work/t"
  done
}
serial=$(grep -h 'serial:' "$fleet"/sites/site-000/nodes/*.yaml | awk 'NR==1 {print $2}')
cold=$(time_runs bin/bootops explain "$fleet" --serial "$serial" | median)
diff=$(time_runs bin/bootops diff "$fleet" --base HEAD~1 --head HEAD --detailed-exitcode | median)
grep -m1 '^Plan:' "$work/out" || true
echo "repository: 10,000 nodes, 50 sites, 100 nodes changed; $runs runs each, median"
echo "| command | seconds |"
echo "| --- | --- |"
echo "| cold compile of one revision (bootops explain) | $cold |"
echo "| bootops diff --base HEAD~1 --head HEAD | $diff |"
awk -v d="$diff" -v c="$cold" 'BEGIN { printf "diff / cold compile: %.2f× (target ≤ 2×)\n", d / c }'
