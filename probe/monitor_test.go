package probe_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/probe"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMonitor: an edge whose origin is gone still answers TCP, but the
// handshake fails, so the monitor says down; a working edge is up; a
// refused address is down without a connect time. The gauges and GET
// /status say the same; an address leaving the set loses its series.
func TestMonitor(t *testing.T) {
	f := newFleet(t, kindEdge, kindOrphan, kindRefused)
	up, orphan, refused := f.addrs[0], f.addrs[1], f.addrs[2]
	reg := prometheus.NewRegistry()
	cfg := f.config(t)
	m, err := probe.NewMonitor(cfg, f.o.AgentTLS(), reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Resolver = probe.DNSResolver(f.named.Addr)
	st := m.Round(context.Background())
	t.Logf("%+v", st)
	if st.Error != "" || len(st.Edges) != 3 {
		t.Fatalf("status %+v", st)
	}
	by := map[string]probe.EdgeStatus{}
	for _, e := range st.Edges {
		by[e.Addr] = e
	}
	if e := by[up]; !e.Up || e.TCPConnectMS <= 0 || e.TLSHandshakeMS <= 0 {
		t.Fatalf("working edge %+v", e)
	}
	if e := by[orphan]; e.Up || e.TCPConnectMS <= 0 || e.TLSHandshakeMS != 0 || !strings.Contains(e.Error, "tls handshake") {
		t.Fatalf("edge without origin %+v: want TCP ok, handshake failed, down", e)
	}
	if e := by[refused]; e.Up || e.TCPConnectMS != 0 {
		t.Fatalf("refused address %+v", e)
	}

	for addr, want := range map[string]float64{up: 1, orphan: 0, refused: 0} {
		if got, ok := metric(t, reg, "edgefleet_probe_edge_up", addr); !ok || got != want {
			t.Errorf("edgefleet_probe_edge_up{addr=%q} = %v (%v), want %v", addr, got, ok, want)
		}
	}
	for _, tc := range []struct {
		name string
		has  map[string]bool
	}{
		{"edgefleet_probe_tcp_connect_seconds", map[string]bool{up: true, orphan: true, refused: false}},
		{"edgefleet_probe_tls_handshake_seconds", map[string]bool{up: true, orphan: false, refused: false}},
	} {
		for addr, want := range tc.has {
			if v, ok := metric(t, reg, tc.name, addr); ok != want || (ok && v <= 0) {
				t.Errorf("%s{addr=%q} = %v, present %v; want present %v", tc.name, addr, v, ok, want)
			}
		}
	}

	// The refused address leaves the set: its series go with it.
	f.Unpublish(t, refused)
	if st := m.Round(context.Background()); len(st.Edges) != 2 {
		t.Fatalf("after the removal: %+v", st)
	}
	if _, ok := metric(t, reg, "edgefleet_probe_edge_up", refused); ok {
		t.Error("an address that left the set kept its edge_up series")
	}
	if _, ok := metric(t, reg, "edgefleet_probe_edge_up", up); !ok {
		t.Error("the working edge lost its series")
	}

	srv := httptest.NewServer(m)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got probe.Status
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || len(got.Edges) != 2 || got.Name != cfg.Name {
		t.Fatalf("GET /status: %+v %v", got, err)
	}
	var table strings.Builder
	st.WriteTable(&table)
	if !strings.Contains(table.String(), orphan) || strings.Count(table.String(), " down ") != 2 {
		t.Fatalf("table:\n%s", table.String())
	}
}

// metric is the value of series name{addr} in reg, and whether it exists.
func metric(t *testing.T, reg *prometheus.Registry, name, addr string) (float64, bool) {
	t.Helper()
	return testbed.Metric(t, reg, name, map[string]string{"addr": addr})
}

// TestMonitorUnresolvable: the name stops resolving (both records
// removed from the real named) while one of its two edges is stopped.
// The monitor does not go blind: it logs it, resolve_up says so, and it
// probes the last set again, so the stopped edge is down with its error
// and the live one shows its handshake, but neither is up: no agent can
// find an edge through a name that does not resolve.
func TestMonitorUnresolvable(t *testing.T) {
	f := newFleet(t, kindEdge, kindEdge)
	stopped, live := f.addrs[0], f.addrs[1]
	reg := prometheus.NewRegistry()
	cfg := f.config(t)
	m, err := probe.NewMonitor(cfg, f.o.AgentTLS(), reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs testbed.Buffer
	m.Resolver = probe.DNSResolver(f.named.Addr)
	m.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	resolveUp := func() float64 {
		t.Helper()
		v, ok := testbed.Metric(t, reg, "edgefleet_probe_resolve_up", map[string]string{"name": cfg.Name})
		if !ok {
			t.Fatal("no edgefleet_probe_resolve_up series")
		}
		return v
	}
	if st := m.Round(context.Background()); st.Error != "" || len(st.Edges) != 2 || !st.Edges[0].Up || !st.Edges[1].Up || resolveUp() != 1 {
		t.Fatalf("first round %+v, resolve_up %v", st, resolveUp())
	}

	f.edges[stopped].Stop()
	f.Unpublish(t, stopped)
	f.Unpublish(t, live)
	st := m.Round(context.Background())
	if !strings.Contains(st.Error, "resolve "+cfg.Name) || len(st.Edges) != 2 {
		t.Fatalf("unresolvable round %+v, want the error and the last two edges", st)
	}
	by := map[string]probe.EdgeStatus{}
	for _, e := range st.Edges {
		by[e.Addr] = e
	}
	if e := by[stopped]; e.Up || !strings.Contains(e.Error, "refused") {
		t.Errorf("stopped edge %+v, want down with its refusal", e)
	}
	if e := by[live]; e.Up || e.TLSHandshakeMS <= 0 || !strings.Contains(e.Error, "does not resolve") {
		t.Errorf("live edge %+v, want probed (a handshake time) but not up", e)
	}
	for _, addr := range []string{stopped, live} {
		if v, ok := metric(t, reg, "edgefleet_probe_edge_up", addr); !ok || v != 0 {
			t.Errorf("edgefleet_probe_edge_up{addr=%q} = %v (%v), want 0", addr, v, ok)
		}
	}
	if _, ok := metric(t, reg, "edgefleet_probe_tls_handshake_seconds", live); !ok {
		t.Error("the live edge lost its handshake series: the monitor stopped probing it")
	}
	if resolveUp() != 0 {
		t.Error("edgefleet_probe_resolve_up still 1")
	}
	lines := logs.JSONLines("name does not resolve: no edge is up")
	if len(lines) != 1 || lines[0]["target"] != cfg.Name || !strings.Contains(lines[0]["err"].(string), cfg.Name) {
		t.Fatalf("log lines %v, want one naming the target and the error", lines)
	}
}
