package core_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
)

// A failover balancer without switchback whose preferred server dies
// between two Selects: the add that finds L1 dead fails over to L2 in the
// core's connect walk (no Select ever saw L1 OFFLINE), and from then on
// adds stay on L2 — after L1 is back, for the same client and a new one —
// whether L1 came back by its OFFLINE period ending or by the monitor's
// "server up" (before the fix both went back to L1).
func TestFailoverBalancerStaysAfterConnectWalk(t *testing.T) {
	for _, back := range []string{"offline expiry", "monitor up"} {
		t.Run(back, func(t *testing.T) {
			sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
			monitor := 3600.0
			mod := func(*core.Config) {}
			if back == "monitor up" {
				monitor = 1
				mod = func(c *core.Config) { c.Now = time.Now }
			}
			h := newHarness(t, lbDLP(2, 60, monitor, named(sl),
				`{"object": "LoadBalancer", "name": "FO", "algorithm": "failover", "switchback": 0, "routes": [
    {"server": "L1", "priority": {"bind": 2, "default": 1}},
    {"server": "L2", "priority": {"bind": 1, "default": 2}}]}`,
				balanceTo("UserRouting", "ALL", "(user=*)", "FO"),
				proxy([]string{"ALL"}, nil)), mod)
			add(t, boundClient(t, h), "a1") // binds on L2, adds on L1
			sl[0].Kill()
			c := boundClient(t, h)
			add(t, c, "a2") // L1 refuses: the walk goes on to L2
			if err := sl[0].Start(); err != nil {
				t.Fatal(err)
			}
			if back == "monitor up" {
				waitWithin(t, 20*time.Second, `the monitor's "server up" for L1`, func() bool {
					return slices.ContainsFunc(h.logs.JSONLines("server up"), func(l map[string]any) bool { return l["target"] == "L1" })
				})
			} else {
				h.clock.Advance(61 * time.Second)
			}
			if h.srv.Health().Offline("L1") {
				t.Fatal("L1 is still OFFLINE")
			}
			add(t, c, "a3")
			add(t, boundClient(t, h), "a4")
			if got, want := h.targets("add"), []string{"L1", "L2", "L2", "L2"}; !slices.Equal(got, want) {
				t.Errorf("adds went to %v, want %v", got, want)
			}
			if got := h.targets("bind"); !slices.Equal(got, []string{"L2", "L2", "L2"}) {
				t.Errorf("binds went to %v, want L2 each time", got)
			}
			// L2 fails in turn: the adds go back to L1 (seed 003).
			sl[1].Kill()
			add(t, boundClient(t, h), "a5")
			if got := h.targets("add"); fmt.Sprint(got[len(got)-1]) != "L1" {
				t.Errorf("with L2 dead the add went to %s, want L1", got[len(got)-1])
			}
		})
	}
}
