#!/usr/bin/env bash
# summary.sh LOG: what `go test -v ./test/e2e` wrote to LOG, in brief, for
# the end of a CI log: each test's time, slowest first, then why each
# failed test failed (its messages, the first lines of each, without the
# lab's log dumps, which come before in full).
set -euo pipefail
log=$1

echo
echo "e2e tests by time:"
{ grep -E '^\s*--- (PASS|FAIL)' "$log" || true; } | sed -E 's/^\s*--- (PASS|FAIL): (\S+) \(([0-9.]+)s\)/\3 \1 \2/' | sort -rn |
	awk '{ printf "  %8.1f s  %-4s  %s\n", $1, $2, $3 }'

# What each test's VMs cost the machine's CPU (lab.close), most first.
if grep -q 'timing: its .* VMs used' "$log"; then
	echo
	echo "VMs' CPU by test (the e2e stage is CPU-bound):"
	awk '/^=== (RUN|CONT|NAME) / { cur = $3 } /timing: its .* VMs used/ { sub(/^.*timing: its /, ""); print "  " cur ": " $0 }' "$log"
fi

# Which tests waited for VM slots (test/e2e/slots_test.go), and how long.
if grep -q 'timing: waited .* VM slots' "$log"; then
	echo
	echo "waits for VM slots:"
	awk '/^=== (RUN|CONT|NAME) / { cur = $3 } /timing: waited .* VM slots/ { sub(/^.*timing: /, ""); print "  " cur ": " $0 }' "$log"
fi

awk '
	/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; inmsg = 0; next }
	/^ *--- (PASS|FAIL|SKIP): / {
		if ($2 == "FAIL:") failed[++nf] = $3
		inmsg = 0; next
	}
	/^ +[A-Za-z0-9_.\/-]+\.go:[0-9]+: / {
		text = $0; sub(/^ +[^ ]+ /, "", text)
		inmsg = (text !~ /^---- /)   # the lab log dumps: in full above
		if (inmsg) { msgs[cur] = msgs[cur] $0 "\n"; cont = 0 }
		next
	}
	inmsg && /^        / && cont < 3 { msgs[cur] = msgs[cur] $0 "\n"; cont++; next }
	inmsg && /^        / && cont == 3 { msgs[cur] = msgs[cur] "        …\n"; cont++; next }
	!/^        / { inmsg = 0 }
	END {
		if (nf == 0) exit
		print "\nwhy they failed (each message: its first lines):"
		for (i = 1; i <= nf; i++) {
			t = failed[i]
			if (msgs[t] == "") continue
			print "--- " t
			n = split(msgs[t], lines, "\n")
			for (j = 1; j < n && j <= 60; j++) print lines[j]
			if (n > 61) print "    … (" n - 61 " lines more above)"
		}
	}
' "$log"

# A run that panicked (a test's panic, or -timeout: "panic: test timed out
# after …" and the tests still running) has no "--- FAIL" for them.
if grep -q '^panic: ' "$log"; then
	echo
	echo "the run panicked:"
	grep -A 15 '^panic: ' "$log" | head -n 16
fi
