#!/usr/bin/env bash
# bench.sh runs every benchmark program under bench/ in turn (bench/edge,
# bench/front, bench/core, …). `make bench` calls it after `make build`.
# BENCH=edge,core limits the run to the named programs; each prints its
# own Markdown table and writes it under bench/results/.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x bin/edge ] || { echo "bench: bin/edge is missing: run make build" >&2; exit 1; }
mkdir -p bench/results bin
# The programs run one after the other in one network namespace, made
# for this run, with only its loopback: hundreds of thousands of short
# loopback connections would otherwise fill the host's conntrack table
# (Docker loads conntrack; each closed connection stays 120 s) and the
# kernel would drop every new SYN on the machine, the benchmark's own
# included ("nf_conntrack: table full"). A fresh namespace without rules
# tracks nothing. nsenter joins only the network namespace (ip netns exec
# would remount /sys, and with it the cgroup file system the cheap-VM
# shape writes to).
#
# Each program runs in the background and the script waits for it: on
# SIGTERM or SIGINT the script sends it SIGTERM and waits for it (it
# stops what it started and removes its files: benchkit.Main) before the
# namespace goes, so that nothing is left running in a namespace without
# a name.
ns=edgefleet-bench-$$
ip netns add "$ns" && ip -n "$ns" link set lo up || { echo "bench: cannot make the network namespace $ns" >&2; exit 1; }
child=
cleanup() {
	if [ -n "$child" ]; then
		kill -TERM "$child" 2>/dev/null
		wait "$child" 2>/dev/null
		child=
	fi
	ip netns del "$ns" 2>/dev/null
}
trap 'cleanup' EXIT
trap 'echo "bench: interrupted" >&2; cleanup; exit 130' INT
trap 'echo "bench: terminated" >&2; cleanup; exit 143' TERM
status=0
for dir in bench/*/; do
	name=$(basename "$dir")
	[ "$name" = results ] && continue
	compgen -G "${dir}*.go" >/dev/null || continue
	if [ -n "${BENCH:-}" ] && [[ ",$BENCH," != *",$name,"* ]]; then continue; fi
	echo "== bench/$name"
	if ! go build -o "bin/bench-$name" "./bench/$name"; then status=1; continue; fi
	nsenter --net="/run/netns/$ns" "bin/bench-$name" &
	child=$!
	wait "$child"
	rc=$?
	child=
	[ $rc -eq 0 ] || { echo "bench/$name failed" >&2; status=1; }
done
exit $status
