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
