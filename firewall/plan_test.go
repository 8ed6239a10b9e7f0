package firewall

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func edges() []Edge {
	return []Edge{
		{Name: "edge-1", IPv4: "203.0.113.10", IPv6: "2001:db8::10"},
		{Name: "edge-2", IPv4: "203.0.113.11"},
	}
}

func TestPlanGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		gen  int
	}{
		{name: "docker", gen: 1, cfg: Config{Chain: DockerUser, Ports: []int{8636}, Interface: "eth0", Edges: edges()}},
		{name: "docker-address", gen: 7, cfg: Config{Chain: DockerUser, Ports: []int{636, 8636}, Address: "192.0.2.2", Edges: edges()}},
		{name: "docker-interface-and-address", gen: 2, cfg: Config{Chain: DockerUser, Ports: []int{8636}, Interface: "eth0", Address: "2001:db8::2", Edges: edges()}},
		{name: "input", gen: 1, cfg: Config{Chain: Input, Ports: []int{8636}, Edges: edges()}},
		{name: "forced-empty", gen: 3, cfg: Config{Chain: DockerUser, Ports: []int{8636}, Interface: "eth0", Force: true}},
		{name: "forced-unpinned", gen: 1, cfg: Config{Chain: DockerUser, Ports: []int{8636}, Force: true,
			Edges: []Edge{{Name: "edge-1", IPv4: "203.0.113.10"}, {Name: "bad", IPv4: "203.0.113.300"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlan(tc.cfg, tc.gen)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", tc.name+".golden"), p.String())
		})
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n%s", path, strings.Join(diff(strings.Split(string(want), "\n"), strings.Split(got, "\n")), "\n"))
	}
}

func TestPlanRefusals(t *testing.T) {
	base := func() Config {
		return Config{Chain: DockerUser, Ports: []int{8636}, Interface: "eth0", Edges: edges()}
	}
	for _, tc := range []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{name: "empty edge list", edit: func(c *Config) { c.Edges = nil },
			wantErr: "the edge list is empty: the rules would let no one reach the origin ports"},
		{name: "bad ipv4", edit: func(c *Config) { c.Edges[1].IPv4 = "203.0.113.300" },
			wantErr: `edge edge-2: ipv4 "203.0.113.300" is not an IPv4 address`},
		{name: "ipv6 given as ipv4", edit: func(c *Config) { c.Edges[1].IPv4 = "2001:db8::1" },
			wantErr: `edge edge-2: ipv4 "2001:db8::1" is not an IPv4 address`},
		{name: "bad ipv6", edit: func(c *Config) { c.Edges[0].IPv6 = "2001:db8::zz" },
			wantErr: `edge edge-1: ipv6 "2001:db8::zz" is not an IPv6 address`},
		{name: "edge without address", edit: func(c *Config) { c.Edges[1].IPv4 = "" },
			wantErr: "edge edge-2: no address"},
		{name: "no pin in DOCKER-USER", edit: func(c *Config) { c.Interface = "" },
			wantErr: "origin.interface and origin.address are both empty: without a pin the origin's own outbound connections to port 8636 would be dropped too"},
		{name: "no ports (not forceable)", edit: func(c *Config) { c.Ports = nil; c.Force = true },
			wantErr: "origin.ports: at least one port is required"},
		{name: "bad port", edit: func(c *Config) { c.Ports = []int{0} }, wantErr: "origin.ports: 0 is not a TCP port"},
		{name: "bad chain", edit: func(c *Config) { c.Chain = "FORWARD" }, wantErr: `chain: "FORWARD" is not DOCKER-USER or INPUT`},
		{name: "unspecified origin address", edit: func(c *Config) { c.Address = "0.0.0.0" }, wantErr: `origin.address: "0.0.0.0" is the unspecified address, not one host (leave origin.address empty for a port published on every address)`},
		{name: "bad origin address", edit: func(c *Config) { c.Address = "192.0.2" }, wantErr: `origin.address: "192.0.2" is not an IP address`},
		{name: "mapped origin address", edit: func(c *Config) { c.Address = "::ffff:192.0.2.2" }, wantErr: `origin.address: "::ffff:192.0.2.2" is IPv4-mapped: write it as 192.0.2.2`},
		{name: "edge name with a space", edit: func(c *Config) { c.Edges[0].Name = "edge one" }, wantErr: `edge name "edge one"`},
		{name: "no pin is fine in INPUT", edit: func(c *Config) { c.Interface = ""; c.Chain = Input }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(&c)
			_, err := NewPlan(c, 1)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("NewPlan: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("NewPlan: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSplitRule(t *testing.T) {
	for _, line := range []string{
		`-A EDGEFLEET-1 -s 203.0.113.10/32 -i eth0 -p tcp -m conntrack --ctstate NEW --ctorigdstport 8636 --ctdir ORIGINAL -m comment --comment "edgefleet: edge edge-1 port 8636" -j RETURN`,
		`-A X -m comment --comment "a \"quoted\" \\ word" -j DROP`,
		`-A X -m comment --comment edgefleet -j DROP`,
	} {
		args := splitRule(line)
		if got := Rule(args[2:]).Line(args[0], args[1]); got != line {
			t.Errorf("round trip:\n got %s\nwant %s", got, line)
		}
	}
}

func TestDiff(t *testing.T) {
	if d := diff([]string{"a", "b"}, []string{"a", "b"}); d != nil {
		t.Fatalf("equal: %q", d)
	}
	got := strings.Join(diff([]string{"a", "x", "c"}, []string{"a", "c", "d"}), "|")
	if got != "  a|- x|  c|+ d" {
		t.Fatalf("diff = %q", got)
	}
}

// TestDocsShowGolden keeps docs/firewall.md's rule listing the real one.
func TestDocsShowGolden(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("testdata", "docker.golden"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(testbed.DocBlocks(t, "docs/firewall.md", ""), string(want)) {
		t.Error("docs/firewall.md does not show testdata/docker.golden verbatim: paste it again")
	}
}
