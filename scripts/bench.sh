#!/usr/bin/env bash
# bench.sh runs every benchmark program under bench/ in turn (bench/edge,
# bench/front, bench/core, …). `make bench` calls it after `make build`.
# BENCH=edge,core limits the run to the named programs; each prints its
# own Markdown table and writes it under bench/results/.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x bin/edge ] || { echo "bench: bin/edge is missing: run make build" >&2; exit 1; }
mkdir -p bench/results bin
# Every program runs in a network namespace of its own, with only its
# loopback: hundreds of thousands of short loopback connections would
# otherwise fill the host's conntrack table (Docker loads conntrack; each
# closed connection stays 120 s) and the kernel would drop every new SYN
# on the machine, the benchmark's own included ("nf_conntrack: table
# full"). A fresh namespace without rules tracks nothing. nsenter joins
# only the network namespace (ip netns exec would remount /sys, and with
# it the cgroup file system the cheap-VM shape writes to).
ns=edgefleet-bench-$$
ip netns add "$ns" && ip -n "$ns" link set lo up || { echo "bench: cannot make the network namespace $ns" >&2; exit 1; }
trap 'ip netns del "$ns"' EXIT
status=0
for dir in bench/*/; do
	name=$(basename "$dir")
	[ "$name" = results ] && continue
	compgen -G "${dir}*.go" >/dev/null || continue
	if [ -n "${BENCH:-}" ] && [[ ",$BENCH," != *",$name,"* ]]; then continue; fi
	echo "== bench/$name"
	if ! go build -o "bin/bench-$name" "./bench/$name"; then status=1; continue; fi
	nsenter --net="/run/netns/$ns" "bin/bench-$name" || { echo "bench/$name failed" >&2; status=1; }
done
exit $status
