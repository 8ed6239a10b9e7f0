package deploy

import (
	"strings"
	"testing"
)

const inventoryYAML = `# The fleet.
name: ldap.example.net # what agents resolve
zone: example.net
ttl: 60
edges:
  # Paris
  - name: e1
    ipv4: 192.0.2.1
    metrics: 192.0.2.1:9101
  # e2 is the spare
  - {name: e2, ipv4: 192.0.2.2} # flow style
# end of edges
`

// TestRotateInventory: e2 is replaced by e3 in place, in e2's flow style;
// every comment is kept but the one naming e2; the result is golden.
func TestRotateInventory(t *testing.T) {
	out, err := RotateInventory([]byte(inventoryYAML), "e2", Edge{Name: "e3", IPv4: "192.0.2.3", IPv6: "2001:db8::3"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "rotate-e2-e3.yaml", string(out))
	for _, c := range []string{"# The fleet.", "# what agents resolve", "# Paris", "# end of edges"} {
		if !strings.Contains(string(out), c) {
			t.Errorf("comment %q lost:\n%s", c, out)
		}
	}
	if strings.Contains(string(out), "e2") {
		t.Errorf("e2 is still there:\n%s", out)
	}
}

func TestRotateInventoryRefusals(t *testing.T) {
	for _, tc := range []struct{ out, in, want string }{
		{"e9", "e3", `no edge "e9"`},
		{"e1", "e2", `edge "e2" is already listed`},
		// The new edge takes the address of another one: that one is named
		// (it used to be blamed on the edge after the rotated one).
		{"e1", "e3=192.0.2.2", `fleet.yaml: 192.0.2.2 is already the address of edge "e2"`},
		{"e2", "e3=192.0.2.1", `fleet.yaml: 192.0.2.1 is already the address of edge "e1"`},
	} {
		in, addr, ok := strings.Cut(tc.in, "=")
		if !ok {
			addr = "192.0.2.3"
		}
		_, err := RotateInventory([]byte(inventoryYAML), tc.out, Edge{Name: in, IPv4: addr})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rotate %s -> %s: err = %v, want %q", tc.out, tc.in, err, tc.want)
		}
	}
	if _, err := RotateInventory([]byte("name: [\n"), "e1", Edge{Name: "e3"}); err == nil || !strings.HasPrefix(err.Error(), "fleet.yaml: ") {
		t.Errorf("bad yaml: err = %v", err)
	}
}

// TestParseIn: one or two addresses, one of each family, in either
// order; a third address, two of one family or a non-address is an
// error, never an address silently dropped.
func TestParseIn(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"e5=192.0.2.5", "e5=192.0.2.5", ""},
		{"e5=2001:db8::5,192.0.2.5", "e5=192.0.2.5,2001:db8::5", ""},
		{"e5=2001:db8::5", "e5=2001:db8::5", ""},
		{"e5=192.0.2.5,2001:db8::5,192.0.2.6", "", `3 addresses, want at most two`},
		{"e5=192.0.2.5,192.0.2.6", "", "two IPv4 addresses"},
		{"e5=2001:db8::5,2001:db8::6", "", "two IPv6 addresses"},
		{"e5=192.0.2.5,", "", `"" is not an IP address`},
		{"e5=host.example", "", `"host.example" is not an IP address`},
		{"e5", "", "want NAME=IPV4[,IPV6]"},
		{"=192.0.2.5", "", "want NAME=IPV4[,IPV6]"},
	} {
		e, err := ParseIn(tc.in)
		switch {
		case tc.err == "" && (err != nil || e.String() != tc.want):
			t.Errorf("ParseIn(%q) = %v, %v; want %s", tc.in, e, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseIn(%q) = %v, %v; want an error containing %q", tc.in, e, err, tc.err)
		}
	}
}

// TestCheckIn: the new edge's address held by another edge names that
// edge, whichever comes first in the list; out's own addresses are free.
func TestCheckIn(t *testing.T) {
	cfg := validConfig()
	cfg.Edges = []Edge{{Name: "e1", IPv4: "192.0.2.1"}, {Name: "e2", IPv4: "192.0.2.2", IPv6: "2001:db8::2"}}
	for _, tc := range []struct {
		out string
		in  Edge
		err string
	}{
		{"e1", Edge{Name: "e3", IPv4: "192.0.2.2"}, `--in e3=192.0.2.2: 192.0.2.2 is already the address of edge "e2"`},
		{"e2", Edge{Name: "e3", IPv4: "192.0.2.1"}, `--in e3=192.0.2.1: 192.0.2.1 is already the address of edge "e1"`},
		{"e1", Edge{Name: "e3", IPv4: "192.0.2.3", IPv6: "2001:db8::2"}, `2001:db8::2 is already the address of edge "e2"`},
		{"e1", Edge{Name: "e3", IPv4: "192.0.2.1"}, ""},
	} {
		err := CheckIn(cfg, tc.out, tc.in)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || err.Error() != tc.err && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("CheckIn(%s → %s) = %v, want %q", tc.out, tc.in, err, tc.err)
		}
	}
}

// TestRotationLeft: a rotation fleet.yaml already shows is resumed only
// while the state still holds what it replaced.
func TestRotationLeft(t *testing.T) {
	st := NewState()
	e3 := Edge{Name: "e3", IPv4: "192.0.2.3"}
	if RotationLeft(st, "e1", e3) {
		t.Error("e1 unknown to the state: nothing left")
	}
	st.Edges["e1"] = &EdgeState{IPv4: "192.0.2.1", State: StateDraining}
	if !RotationLeft(st, "e1", e3) {
		t.Error("e1 still draining: left")
	}
	same := Edge{Name: "e1", IPv4: "192.0.2.1"}
	st.Edges["e1"].State = StateActive
	if RotationLeft(st, "e1", same) {
		t.Error("e1 re-addressed to its own address: nothing left")
	}
	if !RotationLeft(st, "e1", Edge{Name: "e1", IPv4: "192.0.2.11"}) {
		t.Error("e1 re-addressed, the state still on the old address: left")
	}
	st.Edges["e1"].IPv4 = "192.0.2.11"
	st.Edges["e1.old"] = &EdgeState{IPv4: "192.0.2.1", State: StateDraining}
	if !RotationLeft(st, "e1", Edge{Name: "e1", IPv4: "192.0.2.11"}) {
		t.Error("e1.old still draining: left")
	}
}
