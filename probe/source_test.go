package probe_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/probe"
)

// TestSource: with source 127.0.0.10 the ranking's probes and the agent's
// connection leave from that address, so the origin's core logs it as the
// claimed address of every operation that came through the edges.
func TestSource(t *testing.T) {
	f := newFleet(t, kindEdge, kindEdge)
	cfg := f.config(t)
	cfg.Source = "127.0.0.10"
	d := f.dialer(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if r := d.Rank(ctx); r.Chosen == "" {
		t.Fatalf("no choice: %+v", r)
	}
	c, err := d.DialContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h, _, _ := net.SplitHostPort(c.LocalAddr().String()); h != "127.0.0.10" {
		t.Errorf("the agent's connection leaves from %s, want 127.0.0.10", c.LocalAddr())
	}
	c.Close()

	var lines []map[string]any
	for deadline := time.Now().Add(10 * time.Second); len(lines) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		lines = f.o.Logs.JSONLines("ldap op")
	}
	if len(lines) < 2 {
		t.Fatalf("%d core lines, want one per probe (2)", len(lines))
	}
	for _, l := range lines {
		claimed, _ := l["claimed"].(string)
		if h, _, _ := net.SplitHostPort(claimed); h != "127.0.0.10" {
			t.Errorf("core line claimed %q, want 127.0.0.10:*: %v", claimed, l)
		}
	}
}

// TestSourceValidate: source is empty or an IP.
func TestSourceValidate(t *testing.T) {
	for source, want := range map[string]string{
		"": "", "127.0.0.10": "", "::1": "",
		"agent.example": `source: "agent.example" is not an IP address`,
		"127.0.0.10:0":  `source: "127.0.0.10:0" is not an IP address`,
	} {
		cfg := probe.DefaultConfig()
		cfg.Name = "ldap.example.com"
		cfg.Source = source
		err := cfg.Validate()
		if got := ""; err != nil {
			got = err.Error()
			if got != want {
				t.Errorf("source %q: %v, want %q", source, err, want)
			}
		} else if want != "" {
			t.Errorf("source %q: accepted, want %q", source, want)
		}
	}
}
