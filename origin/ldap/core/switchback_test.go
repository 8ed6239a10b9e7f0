package core_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-ldap/ldap/v3"

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
			h := newHarness(t, allBalanced(sl, 2, 60, monitor, "FO",
				`{"object": "LoadBalancer", "name": "FO", "algorithm": "failover", "switchback": 0, "routes": [
    {"server": "L1", "priority": {"bind": 2, "default": 1}},
    {"server": "L2", "priority": {"bind": 1, "default": 2}}]}`), mod)
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

// A failover balancer without switchback, every operation type on L1
// first (bind included): L1 frozen until the monitor calls it down moves
// all types to L2 — those never used yet too — and they stay there after
// L1 thaws and the monitor calls it up, for a session opened before and
// one opened after; when L2 is then killed everything is back on L1, and
// stays there once L2 is back (OFFLINE expiry).
func TestFailoverBalancerEveryTypeStays(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	t.Cleanup(sl[0].Thaw)
	h := newHarness(t, allBalanced(sl, 1, 2, 1, "FO",
		`{"object": "LoadBalancer", "name": "FO", "algorithm": "failover", "routes": [
    {"server": "L1", "priority": 1}, {"server": "L2", "priority": 2}]}`), func(c *core.Config) { c.Now = time.Now })
	waitWithin(t, 20*time.Second, "the monitor's first check", func() bool { return h.backend(t, "L1").LastCheck != "" })
	logged := func(msg, target string) func() bool {
		return func() bool {
			return slices.ContainsFunc(h.logs.JSONLines(msg), func(l map[string]any) bool { return l["target"] == target })
		}
	}
	ops := func(c *ldap.Conn, n string) {
		t.Helper()
		if _, err := c.Search(ldap.NewSearchRequest(alice, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
			"(objectClass=*)", []string{"cn"}, nil)); err != nil {
			t.Fatalf("search: %v", err)
		}
		if _, err := c.Compare(alice, "uid", "alice"); err != nil {
			t.Fatalf("compare: %v", err)
		}
		add(t, c, n)
		m := ldap.NewModifyRequest("cn="+n+",ou=writes,"+testbed.Suffix, nil)
		m.Replace("description", []string{n})
		if err := c.Modify(m); err != nil {
			t.Fatalf("modify: %v", err)
		}
	}
	want := func(step, server string, from int) {
		t.Helper()
		for _, op := range []string{"search", "compare", "add", "modify"} {
			if got := h.targets(op)[from:]; slices.ContainsFunc(got, func(s string) bool { return s != server }) {
				t.Errorf("%s: %s went to %v, want %s", step, op, got, server)
			}
		}
	}
	early := boundClient(t, h)
	ops(early, "e1")
	want("at first", "L1", 0)
	sl[0].Freeze()
	waitWithin(t, 30*time.Second, `the monitor's "server down" for L1`, logged("server down", "L1"))
	sl[0].Thaw()
	waitWithin(t, 30*time.Second, `the monitor's "server up" for L1`, logged("server up", "L1"))
	n := len(h.targets("add"))
	late := boundClient(t, h)
	ops(late, "l1")
	ops(early, "e2")
	want("after L1 came back", "L2", n)
	sl[1].Kill()
	waitWithin(t, 30*time.Second, `the monitor's "server down" for L2`, logged("server down", "L2"))
	n = len(h.targets("add"))
	ops(boundClient(t, h), "k1")
	want("with L2 dead", "L1", n)
	if err := sl[1].Start(); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, 30*time.Second, `the monitor's "server up" for L2`, logged("server up", "L2"))
	n = len(h.targets("add"))
	ops(boundClient(t, h), "k2")
	want("after L2 came back", "L1", n)
}
