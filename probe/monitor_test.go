package probe_test

import (
	"context"
	"encoding/json"
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
