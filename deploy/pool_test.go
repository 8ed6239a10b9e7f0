package deploy

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// poolConfig is deployConfig with two origin hosts, the first with two
// ports, and round robin on the edges.
func poolConfig() Config {
	c := deployConfig()
	c.Origin = DefaultConfig().Origin
	c.Origins = []Origin{
		{Name: "par-a", Address: "192.0.2.2", Ports: []int{8636, 8637}, Interface: "eth0"},
		{Name: "par-b", Address: "192.0.2.3", Interface: "eth0", SSH: "root@192.0.2.3",
			HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJzaL4nfthNmBsJ4jMRTX6V25xL0NYFc5pcB3WZgOtWX"},
	}
	c.Deploy.Balance = "round-robin"
	return c
}

// TestRenderPool: every origin host's address and port goes into the
// edge's origins under the host's name, with deploy.balance; the edge
// binary itself accepts the file and names the origins as fleet does.
func TestRenderPool(t *testing.T) {
	c := poolConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := Render(c, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "edge-1-pool.edge.yaml", string(r.EdgeConfig))
	path := testbed.WriteFile(t, t.TempDir(), "edge.yaml", string(r.EdgeConfig))
	out, err := exec.Command(edgeBinary(t), "--config", path, "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("edge --check: %v\n%s", err, out)
	}
	if want := "edge: configuration ok (name edge-1, origins par-a-8636 par-a-8637 par-b)"; strings.TrimSpace(string(out)) != want {
		t.Fatalf("edge --check said %q, want %q", out, want)
	}
}

// TestPoolOfOne: the single origin form is a pool of one host called
// origin, and its rendering is unchanged (no names: o1, o2 … by position).
func TestPoolOfOne(t *testing.T) {
	c := deployConfig()
	hosts := c.Hosts()
	if len(hosts) != 1 || hosts[0].Name != "origin" || hosts[0].Address != "192.0.2.2" || !hosts[0].Local() {
		t.Fatalf("hosts of the single form: %+v", hosts)
	}
	origins := c.Deploy.origins(c)
	if len(origins) != 1 || origins[0].Name != "" || origins[0].Address != "192.0.2.2:8636" {
		t.Fatalf("origins of the single form: %+v", origins)
	}
	if got := poolConfig().Ports(); len(got) != 2 || got[0] != 8636 || got[1] != 8637 {
		t.Fatalf("pool ports %v, want [8636 8637]", got)
	}
}
