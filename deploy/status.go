package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
)

// StateUnknown is the state of a status row for an address live in DNS or
// let in by the firewall that no edge of the inventory or of the state has:
// a stranger, or an edge removed by hand or with the state file lost.
const StateUnknown = "unknown"

// StateWithdrawn is the state of a status row for an inventory edge
// `fleet watch` withdrew: out of DNS until it passes its checks again.
const StateWithdrawn = "withdrawn"

// StatusRow is one edge at a glance (`fleet status`). The JSON names are
// documented in docs/dns-deploy.md and do not change.
type StatusRow struct {
	Edge       string `json:"edge"`          // "" for an unknown address
	Address    string `json:"address"`       // its addresses, comma-separated
	InDNS      string `json:"in_dns"`        // yes, no, partial (some of its addresses)
	InFirewall string `json:"in_firewall"`   // yes, no, partial, "?" when the rules cannot be read, "-" without a firewall
	Handshake  string `json:"tls_handshake"` // "3.1 ms", the slowest of its addresses, or the first failing probe's error
	// Refused is the connections per second the origin's front refused
	// from the edge's addresses (origin.metrics); null when not read.
	Refused *float64      `json:"refused"`
	Active  string        `json:"active"` // active connections from metrics, "-" without, "?" unreadable
	State   string        `json:"state"`  // active, draining, new, failed, unknown, withdrawn
	Probes  []ProbeStatus `json:"probes"` // one per address, in Address's order

	refusedUnknown bool // Refused was asked for and could not be read: "?"
}

// ProbeStatus is the probe of one address of a status row.
type ProbeStatus struct {
	Address     string  `json:"address"` // ip:port probed
	OK          bool    `json:"ok"`
	HandshakeMS float64 `json:"tls_handshake_ms,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// Status builds one row per edge of the inventory, per edge the state
// holds that is leaving (as the converger sees the state: Reconcile — a
// draining entry, an edge removed from fleet.yaml, the old address of a
// re-addressed one), and per address live in DNS or the firewall that
// neither has (state unknown: an address the state does not hold is a
// stranger until a run adopts it as draining). Each row gets the live DNS
// set and firewall rules, a fresh probe of every address (in parallel) and
// its active connections; and, with refused (nil: not asked for), read
// while the probes run, the connections per second the origin refused from
// its addresses. An edge is failed when the probe of any of its addresses
// fails: an agent that picks the failing one does not get through.
// refusedErr says why refused failed: every row's Refused is then null
// and shown "?"; it is a warning, the rows are whole.
func Status(ctx context.Context, cfg Config, st *State, live RRSet, fw Firewall, probe ProbeFunc, conns ConnsFunc, refused RefusedFunc) (rows []StatusRow, refusedErr error) {
	var allowed map[netip.Addr]bool
	fwErr := errors.New("no firewall")
	if fw != nil {
		allowed, fwErr = fw.Allowed()
	}
	items := statusItems(cfg, st, live, allowed, fwErr == nil)
	rows = make([]StatusRow, len(items))
	var rates map[netip.Addr]float64
	var wg sync.WaitGroup
	if refused != nil {
		wg.Go(func() { rates, refusedErr = refused(ctx) })
	}
	for i, it := range items {
		addrs := it.e.Addrs()
		rows[i] = it.row(addrs, live, fw != nil, allowed, fwErr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Connections first: the probe's own must not count.
			if it.e.Metrics != "" && conns != nil {
				if n, err := conns(ctx, it.e.Metrics); err == nil {
					rows[i].Active = strconv.Itoa(n)
				} else {
					rows[i].Active = "?"
				}
			}
			if probe != nil {
				rows[i].probe(ctx, probe, addrs, cfg.Probe.Port)
			}
		}()
	}
	wg.Wait()
	if refused != nil {
		setRefused(rows, items, rates, refusedErr)
	}
	return rows, refusedErr
}

// setRefused fills each row's Refused, the rates of its addresses summed
// (an address the origin refused nothing from counts 0), or, when err
// says they could not be read, marks it unknown.
func setRefused(rows []StatusRow, items []statusItem, rates map[netip.Addr]float64, err error) {
	for i, it := range items {
		if err != nil {
			rows[i].refusedUnknown = true
			continue
		}
		v := 0.0
		for _, a := range it.e.Addrs() {
			v += rates[a.Unmap()]
		}
		v = math.Round(v*1000) / 1000
		rows[i].Refused = &v
	}
}

// refusedText is the REFUSED column: per second, "?" when it could not be
// read, "-" without origin.metrics.
func (r StatusRow) refusedText() string {
	switch {
	case r.Refused != nil:
		return strconv.FormatFloat(*r.Refused, 'f', 1, 64) + "/s"
	case r.refusedUnknown:
		return "?"
	}
	return "-"
}

// statusItem is an edge Status reports on, with the state it starts
// from.
type statusItem struct {
	e     Edge
	state string
}

// statusItems are Status's rows, in its order: the inventory's edges,
// the leaving ones, then the strangers (addresses live in DNS or in the
// firewall's sources, allowed, that no edge before holds).
func statusItems(cfg Config, st *State, live RRSet, allowed map[netip.Addr]bool, fwKnown bool) []statusItem {
	var items []statusItem
	for _, e := range cfg.Edges {
		state := StateNew
		if s := st.Edges[e.Name]; s != nil && s.State == StateFailed {
			state = StateFailed
		}
		if st.IsWithdrawn(e) {
			state = StateWithdrawn
		}
		items = append(items, statusItem{e, state})
	}
	for _, e := range leaving(cfg, st, live, allowed, fwKnown) {
		items = append(items, statusItem{e, StateDraining})
	}
	known := map[netip.Addr]bool{}
	for _, it := range items {
		for _, a := range it.e.Addrs() {
			known[a] = true
		}
	}
	var strangers []netip.Addr
	for _, a := range live.Addrs() {
		if !known[a] {
			strangers = append(strangers, a)
			known[a] = true
		}
	}
	for a := range allowed {
		if allowed[a] && !known[a] {
			strangers = append(strangers, a)
			known[a] = true
		}
	}
	sortAddrs(strangers)
	for _, a := range strangers {
		e := Edge{IPv6: a.String()}
		if a.Is4() {
			e = Edge{IPv4: a.String()}
		}
		items = append(items, statusItem{e, StateUnknown})
	}
	return items
}

// row is the item's status row without what is measured (active
// connections, the probe): its addresses in the live DNS set and, when
// there is a firewall (hasFW) that answered (fwErr nil), in its allowed
// sources.
func (it statusItem) row(addrs []netip.Addr, live RRSet, hasFW bool, allowed map[netip.Addr]bool, fwErr error) StatusRow {
	var strs []string
	for _, a := range addrs {
		strs = append(strs, a.String())
	}
	row := StatusRow{Edge: it.e.Name, Address: strings.Join(strs, ","), State: it.state, Active: "-"}
	row.InDNS = yesNo(len(addrs), count(addrs, live.Has))
	row.InFirewall = "?"
	if !hasFW {
		row.InFirewall = "-"
	} else if fwErr == nil {
		row.InFirewall = yesNo(len(addrs), count(addrs, func(a netip.Addr) bool { return allowed[a] }))
	}
	if it.state == StateNew && row.InDNS == "yes" {
		row.State = StateActive
	}
	return row
}

// leaving are the edges the state holds that the next run drains, in the
// state's order: Reconcile on a copy of st (the live DNS set, and the
// firewall's sources when fwKnown), keeping only addresses st already
// holds — an address Reconcile would adopt now is nobody's yet, and
// Status shows it as unknown.
func leaving(cfg Config, st *State, live RRSet, allowed map[netip.Addr]bool, fwKnown bool) []Edge {
	held := st.Names()
	view := NewState()
	for name, s := range st.Edges {
		c := *s
		view.Edges[name] = &c
	}
	var fw map[netip.Addr]string
	if fwKnown {
		fw = map[netip.Addr]string{}
		for a, ok := range allowed {
			if ok {
				fw[a] = ""
			}
		}
	}
	Reconcile(cfg, view, live, fw)
	var out []Edge
	for _, name := range view.Sorted() {
		s := view.Edges[name]
		if _, listed := cfg.Edge(name); listed || s.State != StateDraining {
			continue
		}
		e := s.Edge(name)
		for _, a := range e.Addrs() {
			if _, ok := held[a]; !ok {
				if a.Is4() {
					e.IPv4 = ""
				} else {
					e.IPv6 = ""
				}
			}
		}
		if len(e.Addrs()) > 0 {
			out = append(out, e)
		}
	}
	return out
}

// probe probes every address of the row in parallel and fills Probes,
// Handshake and, when one fails, State.
func (r *StatusRow) probe(ctx context.Context, probe ProbeFunc, addrs []netip.Addr, port int) {
	r.Probes = make([]ProbeStatus, len(addrs))
	var wg sync.WaitGroup
	for j, a := range addrs {
		target := net.JoinHostPort(a.String(), strconv.Itoa(port))
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := probe(ctx, target)
			r.Probes[j] = ProbeStatus{Address: target, OK: res.OK, Error: res.Error}
			if res.OK {
				r.Probes[j].HandshakeMS = res.HandshakeMS
			}
		}()
	}
	wg.Wait()
	slowest := 0.0
	for _, p := range r.Probes {
		if !p.OK {
			r.Handshake = p.Error
			if !strings.Contains(p.Error, p.Address) {
				r.Handshake = p.Address + ": " + p.Error
			}
			if r.State != StateDraining && r.State != StateUnknown && r.State != StateWithdrawn {
				r.State = StateFailed
			}
			return
		}
		slowest = max(slowest, p.HandshakeMS)
	}
	if len(r.Probes) > 0 {
		r.Handshake = fmt.Sprintf("%.1f ms", slowest)
	}
}

// StatusProblems says, one line per row, what makes `fleet status` exit
// 1: a failed edge, or an unknown address live in DNS or the firewall;
// nil when every row is well.
func StatusProblems(rows []StatusRow) []string {
	var out []string
	for _, r := range rows {
		switch r.State {
		case StateFailed:
			out = append(out, fmt.Sprintf("%s failed: %s", r.Edge, r.Handshake))
		case StateUnknown:
			where := []string{}
			if r.InDNS == "yes" {
				where = append(where, "DNS")
			}
			if r.InFirewall == "yes" {
				where = append(where, "the firewall")
			}
			out = append(out, fmt.Sprintf("%s is live in %s but no edge of fleet.yaml has it", r.Address, strings.Join(where, " and ")))
		}
	}
	return out
}

func count[T any](s []T, f func(T) bool) int {
	n := 0
	for _, x := range s {
		if f(x) {
			n++
		}
	}
	return n
}

func yesNo(total, n int) string {
	switch {
	case n == 0:
		return "no"
	case n == total:
		return "yes"
	}
	return "partial"
}

// PrintStatus writes the rows as an aligned table.
func PrintStatus(w io.Writer, rows []StatusRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EDGE\tADDRESS\tIN DNS\tIN FIREWALL\tTLS HANDSHAKE\tREFUSED\tACTIVE\tSTATE")
	for _, r := range rows {
		name := r.Edge
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, r.Address, r.InDNS, r.InFirewall, r.Handshake, r.refusedText(), r.Active, r.State)
	}
	return tw.Flush()
}

// PrintStatusJSON writes the rows as one JSON object, {"edges": [row…]},
// with "origins": [host…] in the pool form (docs/dns-deploy.md).
func PrintStatusJSON(w io.Writer, rows []StatusRow, hosts ...HostStatus) error {
	if rows == nil {
		rows = []StatusRow{}
	}
	for i := range rows {
		if rows[i].Probes == nil {
			rows[i].Probes = []ProbeStatus{}
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Edges   []StatusRow  `json:"edges"`
		Origins []HostStatus `json:"origins,omitempty"`
	}{rows, hosts})
}

// PrintHosts writes the origin hosts' firewalls as a table: the live
// generation chains and the drift from the allowed set's rules.
func PrintHosts(w io.Writer, hosts []HostStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ORIGIN\tFIREWALL\tDRIFT")
	for _, h := range hosts {
		chains, drift := strings.Join(h.Chains, ", "), "in sync"
		if chains == "" {
			chains = "-"
		}
		switch {
		case h.Error != "":
			chains, drift = "?", "? "+h.Error
		case len(h.Drift) > 0:
			drift = fmt.Sprintf("%d rule lines differ (fleet apply converges it)", driftLines(h.Drift))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", h.Name, chains, drift)
	}
	return tw.Flush()
}

// driftLines counts the rule lines of a diff that differ ("+" or "-",
// not its headers).
func driftLines(d []string) int {
	n := 0
	for _, l := range d {
		if (strings.HasPrefix(l, "+") || strings.HasPrefix(l, "-")) && !strings.HasPrefix(l, "+++") && !strings.HasPrefix(l, "---") {
			n++
		}
	}
	return n
}

// HostProblems names each origin host whose firewall could not be read
// or drifted from the allowed set (fleet status exits 1).
func HostProblems(hosts []HostStatus) []string {
	var out []string
	for _, h := range hosts {
		switch {
		case h.Error != "":
			out = append(out, fmt.Sprintf("origin %s: the firewall cannot be read: %s", h.Name, h.Error))
		case len(h.Drift) > 0:
			out = append(out, fmt.Sprintf("origin %s: the firewall drifted from the allowed set (fleet apply converges it)", h.Name))
		}
	}
	return out
}
