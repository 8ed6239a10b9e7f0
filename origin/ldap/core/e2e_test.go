package core_test

import (
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
	"github.com/edgefleet/edgefleet/relay"
	"github.com/go-ldap/ldap/v3"
	"github.com/prometheus/client_golang/prometheus"
)

// An agent behind an edge: agent (127.0.0.5) ─LDAPS─▶ edge (127.0.0.2)
// ─PROXY v2─▶ origin front ─▶ core ─▶ slapd. The core's log line carries
// the address the edge claims for the agent, the edge address the front
// measured, the edge's name and the agent name of the pinned certificate.
func TestAgentBehindEdge(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	p := newPKI(t)
	pins := pinsFor(t, p.agent, "agent-7")
	logs := &testbed.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))

	// Core.
	f, err := dlp.Parse("ldap_proxy.json", []byte(dlpFile(3, 60, []server{{"LDAP1", sl[0].Addr, false}}, proxy(nil, []string{"LDAP1"}))))
	if err != nil {
		t.Fatal(err)
	}
	table := origin.NewPeerTable()
	cfg := core.DefaultConfig()
	cfg.TLSMode, cfg.TLS, cfg.Pins = core.TLSMTLS, &tls.Config{Certificates: []tls.Certificate{p.server}}, pins
	lookup := func(port int) (core.Peer, bool) {
		pe, ok := table.Lookup(port)
		return core.Peer{Claimed: pe.Claimed, Measured: pe.Measured, Edge: pe.Edge, ID: pe.ID, Inner: pe.Inner}, ok
	}
	srv, err := core.New(cfg, f, lookup, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	coreLn := listen(t, "127.0.0.1:0")
	serve(t, srv, coreLn)

	// Front.
	fcfg := origin.DefaultConfig()
	fcfg.Listen, fcfg.Inner, fcfg.TrustedEdges = []string{"127.0.0.1:0"}, coreLn.Addr().String(), []string{"127.0.0.0/8"}
	front, err := origin.New(fcfg, table, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	frontLn := listen(t, "127.0.0.1:0")
	serve(t, front, frontLn)

	// Edge.
	ecfg := relay.DefaultConfig()
	ecfg.Name, ecfg.Origins = "edge-test", relay.OriginList(frontLn.Addr().String())
	edge, err := relay.New(ecfg, log, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	edgeLn := listen(t, "127.0.0.2:0")
	serve(t, edge, edgeLn)

	// Agent.
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 5)}, Timeout: 5 * time.Second}
	raw, err := tls.DialWithDialer(d, "tcp", edgeLn.Addr().String(),
		&tls.Config{RootCAs: p.pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{p.agent}})
	if err != nil {
		t.Fatal(err)
	}
	agentAddr := raw.LocalAddr().String()
	c := ldap.NewConn(raw, true)
	c.Start()
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Search(ldap.NewSearchRequest(testbed.Suffix, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
		"(objectClass=*)", nil, nil)); err != nil {
		t.Fatal(err)
	}
	c.Close()

	var line map[string]any
	for _, l := range logs.JSONLines("ldap op") {
		if l["op"] == "search" {
			line = l
		}
	}
	if line == nil {
		t.Fatalf("no search line in:\n%s", logs.String())
	}
	t.Logf("core log line: %v", line)
	measured, _ := line["measured"].(string)
	for k, want := range map[string]string{"claimed": agentAddr, "edge": "edge-test", "agent": "agent-7",
		"user": alice, "target": "LDAP1", "result": "success"} {
		if got, _ := line[k].(string); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if measured == "" || measured == agentAddr || strings.HasPrefix(measured, "127.0.0.5:") {
		t.Errorf("measured = %q: want the edge's address, not the agent's (%s)", measured, agentAddr)
	}
	if id, _ := line["id"].(string); id == "" || strings.HasPrefix(id, "core-") {
		t.Errorf("id = %q, want the edge's connection id", id)
	}
}
