package main

import (
	"flag"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
)

var update = flag.Bool("update", false, "rewrite testdata/invalid.golden")

// TestInvalidConfigs loads each testdata/invalid-*.yml: the error must be
// exactly the one in testdata/invalid.golden for that file (regenerate
// with -update). Wrong types are errors naming the key, never silent
// conversions.
func TestInvalidConfigs(t *testing.T) {
	testbed.InvalidConfigs(t, *update, func(path string) error { _, err := load(nil, path); return err })
}

// TestCoreTLSModeUnknown: a core.tls.mode that does not exist is named as
// such, not answered with the files tls would need.
func TestCoreTLSModeUnknown(t *testing.T) {
	c := defaultCore()
	c.TLS.Mode = "bogus"
	if _, err := c.coreConfig(); err == nil || err.Error() != `core.tls.mode: "bogus" is not off, tls or mtls` {
		t.Fatalf("error %v", err)
	}
}

// TestCoreHandshakeKeys: max_handshakes, handshake_queue_timeout and the
// ticket keys of core.tls reach the core's configuration; their defaults
// are the core's; a negative one is refused, naming the key.
func TestCoreHandshakeKeys(t *testing.T) {
	path := testbed.WriteFile(t, t.TempDir(), "origin.yaml", `core:
  max_handshakes: 3
  handshake_queue_timeout: 2s
  tls:
    ticket_rotation: 30m
    ticket_keys: 0
`)
	cfg, err := load(nil, path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cfg.Core.coreConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.HandshakeSlots != 3 || c.HandshakeQueueTimeout != 2*time.Second || c.TicketRotation != 30*time.Minute || c.TicketKeys != 0 {
		t.Errorf("loaded as slots %d, queue timeout %v, rotation %v, keys %d", c.HandshakeSlots, c.HandshakeQueueTimeout, c.TicketRotation, c.TicketKeys)
	}
	d, _ := defaultCore().coreConfig()
	if want := core.DefaultConfig(); d.HandshakeSlots != want.HandshakeSlots || d.HandshakeQueueTimeout != want.HandshakeQueueTimeout ||
		d.TicketRotation != want.TicketRotation || d.TicketKeys != want.TicketKeys {
		t.Errorf("defaults %+v, want the core's", d)
	}
	bad := defaultCore()
	bad.MaxHandshakes = -1
	if _, err := bad.coreConfig(); err == nil || err.Error() != "core.max_handshakes: -1 is negative" {
		t.Errorf("max_handshakes -1: %v", err)
	}
}

// TestFrontPerEdgeKeys: front.per_edge's keys reach the front's
// configuration from the file and from EDGEFLEET_FRONT_PER_EDGE_*; their
// defaults are the front's.
func TestFrontPerEdgeKeys(t *testing.T) {
	path := testbed.WriteFile(t, t.TempDir(), "origin.yaml", `front:
  per_edge:
    conns: 500
    rate: 600/m
`)
	t.Setenv("EDGEFLEET_FRONT_PER_EDGE_BURST", "50")
	cfg, err := load(nil, path)
	if err != nil {
		t.Fatal(err)
	}
	if want := (origin.PerEdge{Conns: 500, Rate: "600/m", Burst: 50}); cfg.Front.PerEdge != want {
		t.Errorf("loaded as %+v, want %+v", cfg.Front.PerEdge, want)
	}
	if d, want := defaults().Front.PerEdge, origin.DefaultConfig().PerEdge; d != want || d.Conns != 20000 || d.Rate != "1000/s" || d.Burst != 2000 {
		t.Errorf("defaults %+v, want the front's %+v (20000, 1000/s, 2000)", d, want)
	}
}
