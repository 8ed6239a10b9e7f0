package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/bench/internal/benchkit"
)

// The targets of issue 22: with the defences on, the agents through the
// other edge keep ≥ 0.9× their no-flood rate at ≤ 2× its p99; the agent on
// the flooded edge keeps ≥ 0.5× its rate.
const (
	otherRateTarget   = 0.9
	otherP99Target    = 2.0
	floodedRateTarget = 0.5
)

// report is the Markdown table of the phases, each flood phase against
// the no-flood phase of the same configuration.
func report(rs []phaseResult, avail defences, nofile uint64) string {
	var b strings.Builder
	b.WriteString(benchkit.Heading("Flood benchmark"))
	flood := "as fast as the flooder's CPU allows"
	if *floodRate > 0 {
		flood = fmt.Sprintf("paced at %d/s", *floodRate)
	}
	fmt.Fprintf(&b, "Agents: %d through edge-b, %d through edge-a, %.0f operations/s each, a new connection per operation "+
		"(LDAPS with the pinned client certificate, bind, search, close; TLS session cache kept). "+
		"Flood at edge-a from %d addresses, %d connections at once, %s, ≤ %d per phase; %v measured per phase. "+
		"taskset: origin on CPU %s, flooder on CPU %s (GOMAXPROCS=1), the flooded edge-a on CPU %s, edge-b, slapd and the agents on CPU %s (empty: floating). RLIMIT_NOFILE %d.\n\n",
		*agents, *floodedAgents, *agentRate, *floodSources, *floodWorkers, flood, *floodMax, *phaseTime,
		*originCPU, *floodCPU, *floodedCPU, *restCPU, nofile)
	fmt.Fprintf(&b, "Defences in this build: %s. Not available: %s.\n\n", avail.list(true), avail.list(false))
	b.WriteString("| defences | flood | flood conn/s (done/s) | origin CPU | edge-b agents ops/s | × | p99 | × | failed | edge-a agent ops/s | × | p99 | failed | edge-b target | edge-a target |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	base := map[bool]phaseResult{}
	for _, r := range rs {
		if r.flood == "" {
			base[r.on] = r
		}
		b.WriteString(row(r, base[r.on]))
	}
	b.WriteString("\n× is against the no-flood phase of the same defences. Targets (issue 22, with the defences on): " +
		"edge-b agents ≥ 0.9× rate and ≤ 2× p99; the edge-a agent ≥ 0.5× rate. " +
		"Origin CPU is its user+system time over the phase, in CPUs (it has one). " +
		"A flood connection is done when its hello was written or its handshake finished on the flooder's side.\n")
	b.WriteString("\nWhere the connections went (counters over each phase, the agents' included; — none counted or no such counter in this build):\n\n")
	b.WriteString("| defences | flood | edge-a connections by `result` | front per-edge refusals by `reason` | core handshakes by `kind/result` | listen drops (the network namespace) |\n|---|---|---|---|---|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d |\n", r.defences(), r.name(), r.edgeA, r.front, r.core, r.listenDrops)
	}
	return b.String()
}

// row is one phase's line of the table.
func row(r, base phaseResult) string {
	ratio := func(x, y float64) float64 {
		if y == 0 {
			return 0
		}
		return x / y
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
	rate, p99 := ratio(r.other.Rate, base.other.Rate), ratio(float64(r.other.P99), float64(base.other.P99))
	frate := ratio(r.flooded.Rate, base.flooded.Rate)
	flood, otherMet, floodedMet := "—", "—", "—"
	if r.flood != "" {
		a, c := r.floodRate()
		flood = fmt.Sprintf("%.0f (%.0f)", a, c)
		otherMet = met(rate >= otherRateTarget && p99 <= otherP99Target && r.other.OK > 0)
		floodedMet = met(frate >= floodedRateTarget)
	}
	return fmt.Sprintf("| %s | %s | %s | %.2f | %.1f | %.2f× | %s | %.2f× | %d | %.1f | %.2f× | %s | %d | %s | %s |\n",
		r.defences(), r.name(), flood, r.originCPU, r.other.Rate, rate, ms(r.other.P99), p99, r.other.Failed,
		r.flooded.Rate, frate, ms(r.flooded.P99), r.flooded.Failed, otherMet, floodedMet)
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}
