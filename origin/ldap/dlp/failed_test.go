package dlp_test

import (
	"testing"

	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
)

// Balancers.Failed, as the core calls it when it marks a server OFFLINE:
// without switchback every operation type on the failed server moves to
// its next priority at once — types never selected included — and stays
// there once the server is back; other types and balancers with
// switchback are untouched.
func TestFailoverFailedMovesTypes(t *testing.T) {
	bs, h, _, _ := balancers(t, `{"object": "LoadBalancer", "name": "LB", "algorithm": "failover", "routes": [
    {"server": "L1", "priority": {"add": 1, "bind": 2, "default": 1}},
    {"server": "L2", "priority": {"add": 2, "bind": 1, "default": 2}},
    {"server": "L3", "priority": 3}]}`,
		`{"object": "LoadBalancer", "name": "SB", "algorithm": "failover", "switchback": 1, "routes": [
    {"server": "L1", "priority": 1}, {"server": "L2", "priority": 2}]}`)
	if got := first(t, bs, "LB", dlp.Op{Type: "add"}); got != "L1" {
		t.Fatalf("add → %s, want L1", got)
	}
	// L1 fails while the Select that chose it is still being served.
	h.Fail("L1")
	bs.Failed("L1")
	h.Succeed("L1")
	for op, want := range map[string]string{"add": "L2", "search": "L2", "modify": "L2", "bind": "L2"} {
		if got := first(t, bs, "LB", dlp.Op{Type: op}); got != want {
			t.Errorf("after L1 failed and came back: %s → %s, want %s", op, got, want)
		}
	}
	if got := first(t, bs, "SB", dlp.Op{Type: "add"}); got != "L1" {
		t.Errorf("with switchback: add → %s, want L1", got)
	}
	// L2 fails in turn: back to L1, not on to L3.
	h.Fail("L2")
	bs.Failed("L2")
	h.Succeed("L2")
	for op, want := range map[string]string{"add": "L1", "search": "L1", "bind": "L1"} {
		if got := first(t, bs, "LB", dlp.Op{Type: op}); got != want {
			t.Errorf("after L2 failed: %s → %s, want %s", op, got, want)
		}
	}
}

// Searchfilter routes of equal priority: file order decides, every time
// (seed 003 lets any route take the search).
func TestSearchFilterEqualPriorityFileOrder(t *testing.T) {
	bs, _, _, _ := balancers(t, `{"object": "LoadBalancer", "name": "LB", "algorithm": "searchfilter", "routes": [
    {"server": "L2", "priority": 1, "allowed": ["uid"]},
    {"server": "L1", "priority": 1, "allowed": ["uid", "cn"]},
    {"server": "L3", "priority": 1}]}`)
	for range 10 {
		if got := bs.Select("LB", dlp.Op{Type: "search", FilterAttrs: []string{"uid"}}); !equalList(got, []string{"L2", "L1", "L3"}) {
			t.Fatalf("(uid=…) → %v, want [L2 L1 L3]", got)
		}
	}
}
