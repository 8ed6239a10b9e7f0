package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestStatusUnknownAddresses: an address DNS answers or the firewall lets
// in that no edge of the inventory or the state has is a row of its own,
// state unknown, and a problem that makes status exit 1.
func TestStatusUnknownAddresses(t *testing.T) {
	cfg := validConfig()
	cfg.Edges = []Edge{e2}
	live := RRSet{A: addrs("192.0.2.2", "198.51.100.7")}
	fw := fakeAllowed{netip.MustParseAddr("192.0.2.2"): true, netip.MustParseAddr("2001:db8::66"): true}
	ok := func(context.Context, string) ProbeResult { return ProbeResult{OK: true, HandshakeMS: 1} }
	rows, _ := Status(context.Background(), cfg, NewState(), live, fw, ok, nil, nil)
	var got []string
	for _, r := range rows {
		got = append(got, strings.Join([]string{r.Edge, r.Address, r.InDNS, r.InFirewall, r.State}, " "))
	}
	want := []string{
		"e2 192.0.2.2 yes yes active",
		" 198.51.100.7 yes no unknown",
		" 2001:db8::66 no yes unknown",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	problems := StatusProblems(rows)
	wantProblems := []string{
		"198.51.100.7 is live in DNS but no edge of fleet.yaml has it",
		"2001:db8::66 is live in the firewall but no edge of fleet.yaml has it",
	}
	if !slices.Equal(problems, wantProblems) {
		t.Fatalf("problems: %q, want %q", problems, wantProblems)
	}
}

// TestStatusProbesEveryAddress: an edge whose IPv6 address is a black hole
// is failed though its IPv4 one answers, and the error names the address.
func TestStatusProbesEveryAddress(t *testing.T) {
	cfg := validConfig()
	cfg.Edges = []Edge{e3}
	live := RRSet{A: addrs("192.0.2.3"), AAAA: addrs("2001:db8::3")}
	probe := func(_ context.Context, addr string) ProbeResult {
		if strings.HasPrefix(addr, "[2001:db8::3]") {
			return ProbeResult{Error: "tls handshake: i/o timeout"}
		}
		return ProbeResult{OK: true, HandshakeMS: 2}
	}
	rows, _ := Status(context.Background(), cfg, NewState(), live, nil, probe, nil, nil)
	if len(rows) != 1 || rows[0].State != StateFailed || rows[0].Handshake != "[2001:db8::3]:636: tls handshake: i/o timeout" {
		t.Fatalf("rows: %+v", rows)
	}
	if len(rows[0].Probes) != 2 || !rows[0].Probes[0].OK || rows[0].Probes[1].OK {
		t.Fatalf("probes: %+v", rows[0].Probes)
	}
	if p := StatusProblems(rows); len(p) != 1 || !strings.HasPrefix(p[0], "e3 failed: [2001:db8::3]:636") {
		t.Fatalf("problems: %q", p)
	}
}

// TestStatusJSON: --output json's field names, which scripts rely on.
func TestStatusJSON(t *testing.T) {
	rows := []StatusRow{{Edge: "e1", Address: "192.0.2.1", InDNS: "yes", InFirewall: "-", Handshake: "1.0 ms", Active: "-", State: StateActive,
		Probes: []ProbeStatus{{Address: "192.0.2.1:636", OK: true, HandshakeMS: 1}}}}
	var b bytes.Buffer
	if err := PrintStatusJSON(&b, rows); err != nil {
		t.Fatal(err)
	}
	golden(t, "status-json", b.String())
	var back struct{ Edges []StatusRow }
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Edges) != 1 || back.Edges[0].Probes[0].Address != "192.0.2.1:636" {
		t.Fatalf("%v: %s", err, b.String())
	}
}

// TestStatusFollowsTheState: status shows what the state holds as the
// converger sees it. An address live in DNS and the firewall that no
// state holds is unknown; once a run adopted it (here interrupted during
// its wait) it is draining under the name the run gave it, while a
// stranger that appeared since is still unknown. An edge the state holds
// as active that fleet.yaml no longer lists is draining by name too (the
// next run drains it), not an unknown address.
func TestStatusFollowsTheState(t *testing.T) { synctest.Test(t, testStatusFollowsTheState) }

func testStatusFollowsTheState(t *testing.T) {
	ok := func(context.Context, string) ProbeResult { return ProbeResult{OK: true, HandshakeMS: 1} }
	rowsOf := func(c *Converger, w *fakeWorld) []string {
		t.Helper()
		st, err := LoadState(c.StatePath)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		rows, _ := Status(context.Background(), c.Config, st, w.dns, fakeFirewall{w}, ok, nil, nil)
		for _, r := range rows {
			got = append(got, strings.Join([]string{r.Edge, r.Address, r.InDNS, r.InFirewall, r.State}, " "))
		}
		return got
	}
	check := func(what string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: rows:\n%s\nwant:\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}

	w, conv := world(t) // e1 and e2 published and allowed; no state file
	c := conv(e2)
	check("before any run", rowsOf(c, w), "e2 192.0.2.2 yes yes active", " 192.0.2.1 yes yes unknown")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel) // in the bubble: once the run waits
	if err := c.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v, want it interrupted in its wait", err)
	}
	w.dns.add(netip.MustParseAddr("198.51.100.7"))
	check("adopted, then a stranger", rowsOf(c, w),
		"e2 192.0.2.2 yes yes active", "e1 192.0.2.1 no yes draining", " 198.51.100.7 yes no unknown")

	w, conv = world(t)
	if err := conv(e1, e2).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("e1 removed from fleet.yaml", rowsOf(conv(e2), w), "e2 192.0.2.2 yes yes active", "e1 192.0.2.1 yes yes draining")
}
