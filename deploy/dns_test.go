package deploy

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// golden compares got with testdata/name.golden (-update rewrites it).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// TestPlanDNSGolden: the UPDATE plans for the fleet's usual changes, in
// nsupdate syntax: additions before removals, TTL rewrites first, one
// UPDATE ("send") per change, nothing for a set in sync.
func TestPlanDNSGolden(t *testing.T) {
	e1 := Edge{Name: "e1", IPv4: "192.0.2.1", IPv6: "2001:db8::1"}
	e2 := Edge{Name: "e2", IPv4: "192.0.2.2"}
	e3 := Edge{Name: "e3", IPv4: "192.0.2.3", IPv6: "2001:db8::3"}
	live := RRSet{A: addrs("192.0.2.1", "192.0.2.2"), AAAA: addrs("2001:db8::1"), TTLA: 60, TTLAAAA: 60}
	for _, tc := range []struct {
		name  string
		live  RRSet
		edges []Edge
		ttl   uint32
	}{
		{"first-publish", RRSet{}, []Edge{e1, e2}, 60},
		{"in-sync", live, []Edge{e2, e1}, 60},
		{"add-edge", live, []Edge{e1, e2, e3}, 60},
		{"rotate", live, []Edge{e2, e3}, 60},
		{"remove-edge", live, []Edge{e2}, 60},
		{"ttl-change", live, []Edge{e1, e2}, 30},
		{"ttl-change-and-rotate", live, []Edge{e2, e3}, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanDNS("ldap.example.net", tc.live, tc.edges, tc.ttl, map[netip.Addr]string{netip.MustParseAddr("192.0.2.1"): "e1", netip.MustParseAddr("2001:db8::1"): "e1"})
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "dnsplan-"+tc.name, p.String())
			// Never empty: walking the changes in order, the set keeps an
			// address after every UPDATE.
			set := map[netip.Addr]bool{}
			for _, a := range tc.live.Addrs() {
				set[a] = true
			}
			for _, c := range p.Changes {
				switch c.Op {
				case OpAdd:
					set[c.Addr] = true
				case OpRemove:
					delete(set, c.Addr)
				}
				if len(set) == 0 {
					t.Fatalf("the set is empty after %s", c.Describe())
				}
			}
		})
	}
}

func TestPlanDNSRefusesEmpty(t *testing.T) {
	live := RRSet{A: addrs("192.0.2.1"), TTLA: 60}
	_, err := PlanDNS("ldap.example.net", live, nil, 60, nil)
	if err == nil || !strings.Contains(err.Error(), "refusing to leave ldap.example.net. without any address") {
		t.Fatalf("err = %v", err)
	}
}
