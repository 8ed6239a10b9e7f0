package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/edgefleet/edgefleet/bench/internal/benchkit"
)

// phaseResult is what one phase measured.
type phaseResult struct {
	on        bool   // the defences
	flood     string // "", floodHello or floodTLS
	other     agentStats
	flooded   agentStats
	fl        floodStats
	originCPU float64 // the origin's user+system time over the phase, in CPUs

	// Where the connections went, from the counters over the phase:
	// edge-a's connections by result, the front's per-edge refusals by
	// reason, the core's handshakes by kind and result.
	edgeA, front, core string
	listenDrops        int64 // the network namespace's, over the phase
}

// name is the phase as the report names it.
func (r phaseResult) name() string {
	switch r.flood {
	case floodHello:
		return "replayed ClientHello flood"
	case floodTLS:
		return "TLS handshake flood"
	}
	return "no flood"
}

func (r phaseResult) defences() string {
	if r.on {
		return "on"
	}
	return "off"
}

// floodRate is the flood's connections per second and how many of them
// completed (hello written, handshake done) per second.
func (r phaseResult) floodRate() (attempts, completed float64) {
	if r.fl.Seconds == 0 {
		return 0, 0
	}
	return float64(r.fl.Attempts) / r.fl.Seconds, float64(r.fl.Completed) / r.fl.Seconds
}

func (r phaseResult) summary() string {
	a, _ := r.floodRate()
	return fmt.Sprintf("defences %-3s %-27s flood %6.0f/s  origin CPU %.2f  edge-b agents %5.1f ops/s p50 %-6v p99 %-8v failed %d  edge-a agent %5.1f ops/s p99 %-8v failed %d %s",
		r.defences(), r.name(), a, r.originCPU, r.other.Rate, r.other.P50.Round(time.Millisecond), r.other.P99.Round(time.Millisecond), r.other.Failed,
		r.flooded.Rate, r.flooded.P99.Round(time.Millisecond), r.flooded.Failed, firstErrs(r))
}

// firstErrs names the first error of each group of agents, if any.
func firstErrs(r phaseResult) string {
	s := ""
	if r.other.FirstErr != "" {
		s += "(edge-b: " + r.other.FirstErr + ") "
	}
	if r.flooded.FirstErr != "" {
		s += "(edge-a: " + r.flooded.FirstErr + ")"
	}
	return s
}

// runPhase warms fresh agents, starts the flood (if any) at edge-a, gives
// it a second to build up, then runs the agents through both edges for
// -d while reading the origin's CPU time.
func runPhase(st *stack, on bool, flood, hello string) (phaseResult, error) {
	r := phaseResult{on: on, flood: flood}
	other := newAgents(st.base, *agents, 1, st.edges["edge-b"])
	flooded := newAgents(st.base, *floodedAgents, 201, st.edges["edge-a"])
	warm(append(other, flooded...))
	var wait func() (floodStats, error)
	if flood != "" {
		var err error
		if wait, err = startFlood(flood, st.edges["edge-a"], hello, *phaseTime+2*time.Second); err != nil {
			return r, err
		}
		time.Sleep(time.Second)
	}
	e0, o0 := scrape(st.edgeMetrics["edge-a"]), scrape(st.originMetrics)
	_, fd0 := benchkit.ProcStats(st.originPID())
	drops0 := listenDrops()
	cpu0, t0 := benchkit.CPUTime(st.originPID()), time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { r.other = runAgents(other, *agentRate, *phaseTime) })
	wg.Go(func() { r.flooded = runAgents(flooded, *agentRate, *phaseTime) })
	wg.Wait()
	r.originCPU = (benchkit.CPUTime(st.originPID()) - cpu0).Seconds() / time.Since(t0).Seconds()
	if wait != nil {
		fs, err := wait()
		if err != nil {
			return r, err
		}
		r.fl = fs
	}
	benchkit.WaitFDs(st.originPID(), fd0+32) // the origin lets go of the flood before the next phase
	r.listenDrops = listenDrops() - drops0
	e1, o1 := scrape(st.edgeMetrics["edge-a"]), scrape(st.originMetrics)
	r.edgeA = e1.since(e0, "edgefleet_edge_connections_total", "result")
	r.front = o1.since(o0, "edgefleet_front_edge_refused_total", "reason")
	r.core = o1.since(o0, "edgefleet_core_handshakes_total", "kind", "result")
	return r, nil
}
