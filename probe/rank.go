package probe

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Ranking is one measurement of a name's address set: what `probe rank`
// prints and what the state file holds. Ranking lists every address,
// successes fastest first, failures last with their error. Chosen is the
// edge the agent's connections go to first ("" when there is no choice:
// it dials the name), always one of the entries; after a failover it is
// no longer the first entry.
type Ranking struct {
	Name       string    `json:"name"`
	Addresses  []string  `json:"addresses"` // the set it was measured on: IPs, sorted
	MeasuredAt time.Time `json:"measured_at"`
	Ranking    []Result  `json:"ranking"`
	Chosen     string    `json:"chosen"`
	// NoChoice says why Chosen is empty (DNS error, fewer than two
	// addresses, nobody answered, the state file…). It is not part of the
	// JSON shape of docs/probe.md (`probe rank` prints it on stderr) and
	// never in a state file.
	NoChoice string `json:"-"`
}

// noChoice is a Ranking that tells the agent to dial the name.
func noChoice(name string, addrs []string, at time.Time, why string) Ranking {
	if addrs == nil {
		addrs = []string{}
	}
	return Ranking{Name: name, Addresses: addrs, MeasuredAt: at, Ranking: []Result{}, NoChoice: why}
}

// Entry returns the ranking entry of addr.
func (r Ranking) Entry(addr string) (Result, int, bool) {
	for i, e := range r.Ranking {
		if e.Addr == addr {
			return e, i, true
		}
	}
	return Result{}, -1, false
}

// onAddrs reports whether addr ("ip:port") is on one of the IPs addrs.
func onAddrs(addr string, addrs []string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && slices.Contains(addrs, host)
}

// sameSet reports whether addrs (sorted) on port is the set r was
// measured on. A changed port invalidates r like a changed address set:
// its entries (ip:port) and Chosen would send the agent to the old port.
func (r Ranking) sameSet(name string, port int, addrs []string) bool {
	if r.Name != name || !slices.Equal(r.Addresses, addrs) {
		return false
	}
	p := strconv.Itoa(port)
	for _, e := range r.Ranking {
		if _, ep, err := net.SplitHostPort(e.Addr); err != nil || ep != p {
			return false
		}
	}
	return true
}

// Resolve returns the sorted, de-duplicated IPs of name through r (nil:
// the system resolver, which is what the agent's real traffic uses; with
// CGO_ENABLED=0 that is Go's own resolver reading /etc/resolv.conf and
// /etc/hosts).
func Resolve(ctx context.Context, r *net.Resolver, name string) ([]string, error) {
	ips, err := lookupOrder(ctx, r, name)
	if err != nil {
		return nil, err
	}
	return sortedSet(ips), nil
}

// lookupOrder is the IPs of name through r (nil: the system resolver) in
// the resolver's order, the order Go's dialer walks them in.
func lookupOrder(ctx context.Context, r *net.Resolver, name string) ([]netip.Addr, error) {
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", name, err)
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, nil
}

// sortedSet is ips sorted and de-duplicated, as strings: an address set.
func sortedSet(ips []netip.Addr) []string {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, ip := range ips {
		if !seen[ip] {
			seen[ip] = true
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	s := make([]string, len(out))
	for i, ip := range out {
		s[i] = ip.String()
	}
	return s
}

// DNSResolver is a resolver that asks server (host:port) directly: for
// tests and the demo only (`--dns`); agents use the system resolver.
func DNSResolver(server string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
}

// ProbeFunc probes one address ("ip:port").
type ProbeFunc func(ctx context.Context, addr string) Result

// MaxParallel bounds the probes in flight at once (each holds a socket):
// up to that many addresses a ranking costs one budget however many are
// black holes; a hostile or broken DNS answer with thousands of addresses
// costs more budgets, not thousands of file descriptors.
const MaxParallel = 256

// parallel runs fn(i) for every i < n, at most MaxParallel at a time.
func parallel(n int, fn func(i int)) {
	sem := make(chan struct{}, MaxParallel)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
}

// Measure probes every address in parallel (at most MaxParallel at a
// time), each with its own budget inside probe, and returns the results
// ordered: successes fastest first, then failures in address order. Up
// to MaxParallel addresses it costs the slowest probe, so one budget
// however many are black holes; n addresses cost at most
// ⌈n/MaxParallel⌉ budgets.
func Measure(ctx context.Context, addrs []string, port int, probe ProbeFunc) []Result {
	out := make([]Result, len(addrs))
	parallel(len(addrs), func(i int) { out[i] = probe(ctx, net.JoinHostPort(addrs[i], strconv.Itoa(port))) })
	order(out)
	return out
}

// order sorts results: successes by total time, failures after them in
// their given order.
func order(rs []Result) {
	slices.SortStableFunc(rs, func(a, b Result) int {
		switch {
		case a.OK != b.OK:
			if a.OK {
				return -1
			}
			return 1
		case !a.OK:
			return 0
		}
		return cmp.Compare(a.Total(), b.Total())
	})
}
