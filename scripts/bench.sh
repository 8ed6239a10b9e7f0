#!/usr/bin/env bash
# bench.sh runs every benchmark program under bench/ in turn (bench/edge,
# bench/front, bench/core, …). `make bench` calls it after `make build`.
# BENCH=edge,core limits the run to the named programs; each prints its
# own Markdown table and writes it under bench/results/.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x bin/edge ] || { echo "bench: bin/edge is missing: run make build" >&2; exit 1; }
mkdir -p bench/results bin
status=0
for dir in bench/*/; do
	name=$(basename "$dir")
	[ "$name" = results ] && continue
	compgen -G "${dir}*.go" >/dev/null || continue
	if [ -n "${BENCH:-}" ] && [[ ",$BENCH," != *",$name,"* ]]; then continue; fi
	echo "== bench/$name"
	if ! go build -o "bin/bench-$name" "./bench/$name"; then status=1; continue; fi
	"bin/bench-$name" || { echo "bench/$name failed" >&2; status=1; }
done
exit $status
