// Command flood benchmarks what a connection flood through one edge does
// to the agents behind the others, on the demo's stack built from the
// make build binaries: a real slapd, the origin (front and LDAP core,
// mTLS with a pinned agent certificate) pinned to CPU 0 with taskset, and
// two edges on 127.0.0.2 (edge-a, flooded) and 127.0.0.3 (edge-b), each
// dialling the origin from its own address. It is run by `make bench`
// (scripts/bench.sh; BENCH=flood limits the run to it):
//
//	go run ./bench/flood
//	go run ./bench/flood -d 5s -agents 8 -flood-rate 0
//
// Agents are Go LDAP clients (go-ldap) on their own addresses 127.0.1.x:
// -agents through edge-b and -flooded-agents through edge-a. Each
// reconnects for every operation (dial, LDAPS handshake with its client
// certificate, bind, search, close) at -agent-rate operations per second,
// keeping its TLS session cache, as a reconnecting agent does: that is
// the agent a flood hurts. The flooder is this program again, pinned to
// CPU 1 with taskset and GOMAXPROCS=1, from the addresses 127.0.2.x at
// edge-a: it either replays one captured TLS ClientHello (connect, write
// it, close) or runs full crypto/tls handshakes (X25519, no session
// resumption, no client certificate). The flooded edge-a shares the
// flooder's CPU (-flooded-edge-cpu): it stands for a machine of its own,
// the one the flood hits; edge-b, slapd and the agents (this process)
// share the origin's (-rest-cpu), apart from the flood, as the other
// edges and the directory are in a deployment. Empty, either floats.
//
// Six phases in one run: no flood, the hello flood and the TLS flood,
// first with the defences off (edges without limits or tls_gate, the
// front without per_edge, the core with no handshake queue and no
// session tickets), then with them on. A defence the binaries do not
// know yet (its key is refused by edge --check or origin --check) is
// reported as not available and left out. It prints a Markdown table with
// each phase's figures and ratios against the no-flood phase of the same
// configuration, and writes it to -out.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/bench/internal/benchkit"
)

var (
	edgeBin       = flag.String("edge", "bin/edge", "edge binary (make build)")
	originBin     = flag.String("origin", "bin/origin", "origin binary (make build)")
	phaseTime     = flag.Duration("d", 8*time.Second, "measured time of each phase")
	agents        = flag.Int("agents", 16, "agents through edge-b (127.0.1.1, .2, …)")
	floodedAgents = flag.Int("flooded-agents", 1, "agents through edge-a, the flooded edge (127.0.1.201, …)")
	agentRate     = flag.Float64("agent-rate", 10, "operations per second of each agent (a new connection each)")
	floodRate     = flag.Int("flood-rate", 0, "flood connections per second in all (0: as fast as the flooder's CPU allows)")
	floodWorkers  = flag.Int("flood-workers", 256, "concurrent flood connections at most")
	floodMax      = flag.Int("flood-max", 200000, "flood connections per phase, at most")
	floodSources  = flag.Int("flood-sources", 64, "flood source addresses 127.0.2.1, .2, …")
	originCPU     = flag.String("origin-cpu", "0", "taskset CPU list of the origin")
	floodCPU      = flag.String("flood-cpu", "1", "taskset CPU list of the flooder")
	floodedCPU    = flag.String("flooded-edge-cpu", "1", "taskset CPU list of edge-a, the flooded edge (empty: it floats)")
	restCPU       = flag.String("rest-cpu", "0", "CPU list (taskset form: 0, 0,1, 0-3) of edge-b, slapd and the agents (this process and what it starts; empty: they float)")
	floodList     = flag.String("floods", "none,hello,tls", "the phases of each configuration: none (no flood), hello, tls")
	keep          = flag.Bool("keep", false, "keep the temporary directory (configs, logs)")
	out           = flag.String("out", "bench/results/flood.md", "also write the table here (empty: stdout only)")
)

func main() {
	if isFlooder() {
		os.Exit(flooderMain(os.Args[2:]))
	}
	benchkit.Main("flood", run)
}

func progress(format string, args ...any) { benchkit.Progress("flood", format, args...) }

// run measures the phases of both configurations and publishes the table.
func run() error {
	nofile := benchkit.RaiseNofile()
	dir, cleanup, err := benchkit.TempDir("flood", *keep)
	if err != nil {
		return err
	}
	defer cleanup()
	if *restCPU != "" {
		restore, err := benchkit.PinProcess(*restCPU)
		if err != nil {
			return err
		}
		defer restore()
	}
	base, err := newBase(dir)
	if err != nil {
		return err
	}
	defer base.close()
	avail := detectDefences(base)
	for _, d := range avail {
		progress("%s", d)
	}
	hello, err := captureHello(dir)
	if err != nil {
		return fmt.Errorf("capture a ClientHello: %w", err)
	}
	var results []phaseResult
	for _, on := range []bool{false, true} {
		rs, err := runConfig(base, avail, on, hello)
		results = append(results, rs...)
		if err != nil {
			return err
		}
	}
	benchkit.Publish(*out, report(results, avail, nofile))
	return nil
}

// runConfig starts the origin and the edges with the defences on or off
// and runs the three phases against them.
func runConfig(base *base, avail defences, on bool, hello string) ([]phaseResult, error) {
	st, err := base.start(avail, on)
	if err != nil {
		return nil, err
	}
	defer st.stop()
	var rs []phaseResult
	for _, flood := range strings.Split(*floodList, ",") {
		if flood = strings.TrimSpace(flood); flood == "none" {
			flood = ""
		} else if flood != floodHello && flood != floodTLS {
			return rs, fmt.Errorf("-floods: %q is not none, hello or tls", flood)
		}
		r, err := runPhase(st, on, flood, hello)
		if err != nil {
			return rs, err
		}
		progress("%s", r.summary())
		rs = append(rs, r)
		time.Sleep(time.Second) // let the closes settle
	}
	return rs, nil
}
