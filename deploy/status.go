package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
)

// StatusRow is one edge at a glance (`fleet status`).
type StatusRow struct {
	Edge, Address string
	InDNS         string // yes, no, partial (some of its addresses)
	InFirewall    string // yes, no, partial, "?" when the rules cannot be read, "-" without a firewall
	Handshake     string // "3.1 ms", or the probe's error
	Active        string // active connections from metrics, "-" without
	State         string // active, draining, new, failed
}

// Status builds one row per edge of the inventory and per draining edge
// of the state: the live DNS set and firewall rules, a fresh probe through
// every edge (in parallel) and its active connections.
func Status(ctx context.Context, cfg Config, st *State, live RRSet, fw Firewall, probe ProbeFunc, conns ConnsFunc) []StatusRow {
	type item struct {
		e     Edge
		state string
	}
	var items []item
	for _, e := range cfg.Edges {
		state := StateNew
		if s := st.Edges[e.Name]; s != nil && s.State == StateFailed {
			state = StateFailed
		}
		items = append(items, item{e, state})
	}
	for _, name := range st.Sorted() {
		if s := st.Edges[name]; s.State == StateDraining {
			if _, listed := cfg.Edge(name); !listed {
				items = append(items, item{s.Edge(name), StateDraining})
			}
		}
	}
	var allowed map[netip.Addr]bool
	fwErr := errors.New("no firewall")
	if fw != nil {
		allowed, fwErr = fw.Allowed()
	}
	rows := make([]StatusRow, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		addrs := it.e.Addrs()
		var strs []string
		for _, a := range addrs {
			strs = append(strs, a.String())
		}
		row := StatusRow{Edge: it.e.Name, Address: strings.Join(strs, ","), State: it.state, Active: "-"}
		row.InDNS = yesNo(len(addrs), count(addrs, live.Has))
		row.InFirewall = "?"
		if fw == nil {
			row.InFirewall = "-"
		} else if fwErr == nil {
			row.InFirewall = yesNo(len(addrs), count(addrs, func(a netip.Addr) bool { return allowed[a] }))
		}
		if it.state == StateNew && row.InDNS == "yes" {
			row.State = StateActive
		}
		rows[i] = row
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
			if len(addrs) > 0 && probe != nil {
				r := probe(ctx, net.JoinHostPort(addrs[0].String(), strconv.Itoa(cfg.Probe.Port)))
				if r.OK {
					rows[i].Handshake = fmt.Sprintf("%.1f ms", r.HandshakeMS)
				} else {
					rows[i].Handshake = r.Error
					if rows[i].State != StateDraining {
						rows[i].State = StateFailed
					}
				}
			}
		}()
	}
	wg.Wait()
	return rows
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
	fmt.Fprintln(tw, "EDGE\tADDRESS\tIN DNS\tIN FIREWALL\tTLS HANDSHAKE\tACTIVE\tSTATE")
	for _, r := range slices.Clone(rows) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Edge, r.Address, r.InDNS, r.InFirewall, r.Handshake, r.Active, r.State)
	}
	return tw.Flush()
}
