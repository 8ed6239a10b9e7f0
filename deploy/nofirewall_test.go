package deploy

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestConvergeNoFirewall: with no Firewall (fleet --no-firewall) a
// rotation runs the DNS, probe and wait steps in the same order, and steps
// 1 and 6 say what the origin's firewall must allow instead of claiming
// they did it; status shows "?" for the firewall.
func TestConvergeNoFirewall(t *testing.T) {
	w, conv := world(t)
	if err := conv(e1, e2).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := conv(e2, e3)
	c.Firewall = nil
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"probe 192.0.2.3:636", "probe [2001:db8::3]:636",
		"dns add A 192.0.2.3 (e3)", "dns add AAAA 2001:db8::3 (e3)", "dns remove A 192.0.2.1 (e1)",
		"conns 192.0.2.1:9101 = 1", "conns 192.0.2.1:9101 = 1", "conns 192.0.2.1:9101 = 0",
	}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(w.events, "\n"), strings.Join(want, "\n"))
	}
	out := c.Out.(*testbed.Buffer).String()
	for _, line := range []string{
		"step 1/6 firewall: not managed here; the origin's firewall must allow e2 e3 e1\n",
		"step 6/6 firewall: not managed here; the origin's firewall must allow e2 e3\n",
		"; the origin's firewall must allow e2 e3\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("progress lacks %q:\n%s", line, out)
		}
	}
	if strings.Contains(out, "firewall allows") || strings.Contains(out, "in sync, allowing") {
		t.Errorf("progress claims a firewall change:\n%s", out)
	}
	st, err := LoadState(c.StatePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range Status(context.Background(), c.Config, st, w.dns, nil, nil, nil) {
		if row.InFirewall != "?" {
			t.Errorf("status row %+v: in firewall %q, want ?", row, row.InFirewall)
		}
	}
}
