#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME each (default 15s).
# New crashers land in the package's testdata/fuzz/<Target>/ and become
# regular test cases: commit them with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-15s}
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r f; do
	pkg=./$(dirname "${f#./}")
	for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | cut -d' ' -f2); do
		echo "fuzz: $pkg $target ($t)"
		go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$t" -fuzzminimizetime 100x
	done
done
