package main

import (
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"go.yaml.in/yaml/v3"
)

// TestDefencesYAML checks that the defences' keys land where the binaries
// read them, on and off, and that an unavailable one is left out.
func TestDefencesYAML(t *testing.T) {
	ds := allDefences()
	for _, d := range ds {
		d.available, d.offOK = true, true
	}
	ds[3].available = false // edge tls_gate
	pki, err := testbed.NewPKIIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &base{dlp: "ldap_proxy.json", pins: "pins", pki: pki}
	for _, on := range []bool{true, false} {
		var edge map[string]any
		if err := yaml.Unmarshal([]byte(edgeConfig("edge-a", "127.0.0.2:1", "127.0.0.1:1", "", ds.edgeYAML(on))), &edge); err != nil {
			t.Fatalf("on=%v: edge config: %v", on, err)
		}
		limits, _ := edge["limits"].(map[string]any)
		for _, k := range []string{"per_source", "per_prefix", "accept_rate"} {
			if _, ok := limits[k]; !ok {
				t.Errorf("on=%v: edge limits.%s missing: %v", on, k, edge)
			}
		}
		if _, ok := edge["tls_gate"]; ok {
			t.Errorf("on=%v: tls_gate written though not available", on)
		}
		extra := ds.originYAML(on)
		if on && (extra["core"] != "" || extra["core.tls"] != "") {
			t.Errorf("on: the core's defaults are its defences, got %q", extra)
		}
		if !on && (extra["core"] != "max_handshakes: 100000\n" || extra["core.tls"] != "ticket_keys: 0\n") {
			t.Errorf("off: core keys %q", extra)
		}
		cfg, _, err := b.originConfig("127.0.0.1:1", extra)
		if err != nil {
			t.Fatal(err)
		}
		var o struct {
			Front map[string]any
			Core  struct {
				MaxHandshakes *int `yaml:"max_handshakes"`
				TLS           map[string]any
			}
		}
		if err := yaml.Unmarshal([]byte(cfg), &o); err != nil {
			t.Fatalf("on=%v: origin config: %v\n%s", on, err, cfg)
		}
		if _, ok := o.Front["per_edge"]; !ok || o.Core.TLS["mode"] != "mtls" {
			t.Errorf("on=%v: origin config:\n%s", on, cfg)
		}
		if (o.Core.MaxHandshakes != nil) == on {
			t.Errorf("on=%v: max_handshakes %v", on, o.Core.MaxHandshakes)
		}
	}
}

func TestCountersSince(t *testing.T) {
	before := counters{`edgefleet_core_handshakes_total{kind="full",result="ok"}`: 5}
	after := counters{
		`edgefleet_core_handshakes_total{kind="full",result="ok"}`:     7,
		`edgefleet_core_handshakes_total{kind="resumed",result="ok"}`:  10,
		`edgefleet_core_handshakes_total{kind="full",result="failed"}`: 0,
		`edgefleet_core_connections_active`:                            3,
	}
	if got, want := after.since(before, "edgefleet_core_handshakes_total", "kind", "result"), "resumed/ok 10, full/ok 2"; got != want {
		t.Errorf("since = %q, want %q", got, want)
	}
	if got := after.since(before, "edgefleet_front_edge_refused_total", "reason"); got != "—" {
		t.Errorf("absent counter: %q", got)
	}
}
