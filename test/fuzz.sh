#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (default 2m): the
# targets are found in the test files, so a new one is fuzzed without an
# edit here. FUZZ=<regexp> keeps only the targets whose name matches.
# A crasher is written by Go to <package>/testdata/fuzz/<target>/ and the
# script stops with the command that reproduces it.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-2m}
FUZZ=${FUZZ:-.}

mapfile -t targets < <(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . |
	grep -v '^./\.' | while read -r file; do
		pkg=./$(dirname "${file#./}")
		grep -oE '^func Fuzz[A-Za-z0-9_]*' "$file" | sed "s|^func |$pkg |"
	done | sort -u)

n=0
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	[[ $name =~ $FUZZ ]] || continue
	# A target behind a build tag is fuzzed with its tag.
	tags=$(grep -lE "^func $name\(" "$pkg"/*_test.go | xargs sed -n 's|^//go:build \(.*\)$|\1|p' | head -1)
	echo "== $pkg $name ($FUZZTIME)${tags:+ tags $tags}"
	$GO test ${tags:+-tags "$tags"} "$pkg" -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME"
	n=$((n + 1))
done
echo "fuzzed $n targets for $FUZZTIME each"
[ "$n" -gt 0 ]
