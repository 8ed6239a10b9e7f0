package firewall

import (
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

func TestMain(m *testing.M) { testbed.Main(m) }

// fleetBinary builds cmd/fleet once per test run.
func fleetBinary(t *testing.T) string {
	return testbed.Build(t, "github.com/edgefleet/edgefleet/cmd/fleet")
}

// fleet runs the binary inside ns and returns stdout+stderr and the exit
// status.
func fleet(t *testing.T, ns *testbed.Netns, bin string, args ...string) (string, int) {
	t.Helper()
	out, err := ns.Command(bin, args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("fleet %s: %v", strings.Join(args, " "), err)
	return "", 0
}

const fleetYAML = `name: ldap.example.net
zone: example.net
origin:
  ports: [PORT]
  interface: ext0
edges:
  - name: edge-1
    ipv4: 198.51.100.10
    ipv6: 2001:db8:e::10
`

// TestFleetBinary drives `fleet firewall` as an operator would, inside the
// Docker-like namespace host, then in --chain INPUT mode.
func TestFleetBinary(t *testing.T) {
	t.Parallel()
	d := dockerHost(t)
	bin := fleetBinary(t)
	dir := t.TempDir()
	cfg := testbed.WriteFile(t, dir, "fleet.yaml", strings.ReplaceAll(fleetYAML, "PORT", "8636"))

	out, code := fleet(t, d.Host, bin, "--config", cfg, "firewall", "plan")
	wantCfg := hostConfig(d, false)
	wantCfg.Owner = "ldap.example.net"
	want, err := NewPlan(wantCfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || out != want.String() {
		t.Fatalf("plan (exit %d):\n%s\nwant:\n%s", code, out, want)
	}

	if out, code := fleet(t, d.Host, bin, "--config", cfg, "firewall", "apply"); code != 0 {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	assertEdgeOnly(t, d)
	if out, code := fleet(t, d.Host, bin, "--config", cfg, "firewall", "check"); code != 0 || !strings.Contains(out, "in sync: IPv4: EDGEFLEET-1, IPv6: EDGEFLEET-1") {
		t.Errorf("check after apply: exit %d\n%s", code, out)
	}
	d.Host.Run("iptables", "-D", "EDGEFLEET-1", "2") // the edge's rule
	out, code = fleet(t, d.Host, bin, "--config", cfg, "firewall", "check")
	if code != 1 || !strings.Contains(out, `+ -A EDGEFLEET -s 198.51.100.10/32 -i ext0 -p tcp -m conntrack --ctstate NEW --ctorigdstport 8636 --ctdir ORIGINAL -m comment --comment "edgefleet: edge edge-1 port 8636" -j RETURN`) {
		t.Errorf("check after deleting the edge's rule: exit %d, want 1 and the missing rule:\n%s", code, out)
		t.Logf("%s", d.Host.Run("iptables", "-S"))
	}
	t.Logf("check after deleting the edge's rule:\n%s", out)
	if out, code := fleet(t, d.Host, bin, "--config", cfg, "firewall", "apply"); code != 0 || !strings.Contains(out, "chain=EDGEFLEET-2") {
		t.Errorf("re-apply: exit %d\n%s", code, out)
	}
	if out, code := fleet(t, d.Host, bin, "--config", cfg, "firewall", "check"); code != 0 {
		t.Errorf("check after re-apply: exit %d\n%s", code, out)
	}

	t.Run("refusals", func(t *testing.T) {
		bare := testbed.NewNetns(t, "bare") // no Docker: no DOCKER-USER
		bare.Run("ip", "link", "add", "ext0", "type", "veth", "peer", "name", "ext0-peer")
		empty := testbed.WriteFile(t, dir, "empty.yaml", "origin:\n  ports: [8636]\n  interface: ext0\n")
		badAddr := testbed.WriteFile(t, dir, "bad.yaml", strings.ReplaceAll(strings.ReplaceAll(fleetYAML, "PORT", "8636"), "198.51.100.10", "198.51.100.300"))
		unknown := testbed.WriteFile(t, dir, "unknown.yaml", strings.ReplaceAll(fleetYAML, "PORT", "8636")+"edgez: []\n")
		for _, tc := range []struct {
			name string
			ns   *testbed.Netns
			args []string
			code int
			want string
		}{
			{"empty edge list", d.Host, []string{"--config", empty, "firewall", "apply"}, 2,
				"fleet: the edge list is empty: the rules would let no one reach the origin ports"},
			{"bad address", d.Host, []string{"--config", badAddr, "firewall", "apply"}, 2,
				`fleet: edge edge-1: ipv4 "198.51.100.300" is not an IPv4 address`},
			{"unknown key", d.Host, []string{"--config", unknown, "firewall", "plan"}, 2, `unknown key "edgez"`},
			{"missing DOCKER-USER", bare, []string{"--config", cfg, "firewall", "apply"}, 2,
				"has no DOCKER-USER chain: is dockerd running? refusing to create it"},
			{"bad chain", d.Host, []string{"--config", cfg, "firewall", "--chain", "OUTPUT", "plan"}, 2,
				`fleet: chain: "OUTPUT" is not DOCKER-USER or INPUT`},
			{"check without DOCKER-USER", bare, []string{"--config", cfg, "firewall", "check"}, 2,
				"has no DOCKER-USER chain: is dockerd running? refusing to create it"},
			{"check with an empty edge list", d.Host, []string{"--config", empty, "firewall", "check"}, 2,
				"fleet: the edge list is empty"},
			{"create-chain", bare, []string{"--config", cfg, "firewall", "--create-chain", "apply"}, 0, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				out, code := fleet(t, tc.ns, bin, tc.args...)
				if code != tc.code || !strings.Contains(out, tc.want) || (tc.code != 0 && strings.Count(strings.TrimSpace(out), "\n") > 0) {
					t.Errorf("exit %d, want %d and one line containing %q:\n%s", code, tc.code, tc.want, out)
				}
			})
		}
		if out := bare.Run("iptables", "-S", "DOCKER-USER"); !strings.Contains(out, "-j EDGEFLEET-1") {
			t.Errorf("--create-chain: DOCKER-USER is\n%s", out)
		}
	})

	// A second inventory on the same host (another name, another port)
	// would replace the first's rules: refused, and so is its remove.
	other := testbed.WriteFile(t, t.TempDir(), "fleet.yaml", strings.ReplaceAll(strings.ReplaceAll(fleetYAML, "PORT", "9636"), "ldap.example.net", "ldap2.example.net"))
	rules := d.Host.Run("iptables", "-S")
	if out, code := fleet(t, d.Host, bin, "--config", other, "firewall", "apply"); code == 0 || !strings.Contains(out, `the firewall holds the rules of inventory "ldap.example.net": refusing to replace them with those of "ldap2.example.net"`) {
		t.Errorf("apply of a second inventory: exit %d\n%s", code, out)
	}
	if out, code := fleet(t, d.Host, bin, "--config", other, "firewall", "remove"); code != 1 || !strings.Contains(out, `holds the rules of inventory "ldap.example.net"`) {
		t.Errorf("remove by a second inventory: exit %d\n%s", code, out)
	}
	if got := d.Host.Run("iptables", "-S"); got != rules {
		t.Errorf("the second inventory changed the first's rules:\n%s", got)
	}

	if out, code := fleet(t, d.Host, bin, "--config", cfg, "firewall", "remove"); code != 0 {
		t.Fatalf("remove: exit %d\n%s", code, out)
	}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		if out := d.Host.Run(cmd, "-S"); strings.Contains(out, "EDGEFLEET") || strings.Contains(out, "edgefleet") {
			t.Errorf("%s after remove:\n%s", cmd, out)
		}
	}
	if out, code := fleet(t, d.Host, bin, "--config", cfg, "firewall", "remove"); code != 0 {
		t.Errorf("remove with nothing installed: exit %d, want 0\n%s", code, out)
	}
	if out, code := fleet(t, d.Host, bin, "--config", cfg, "firewall", "check"); code != 1 || !strings.Contains(out, "+ -I DOCKER-USER 1") {
		t.Errorf("check after remove: exit %d, want 1 and the missing jump in the diff\n%s", code, out)
	}

	t.Run("INPUT mode", func(t *testing.T) {
		// The host's own listening port, no DNAT: an origin not in Docker.
		testbed.Serve(d.Host.Listen(":9636"))
		in := testbed.WriteFile(t, dir, "input.yaml", strings.ReplaceAll(fleetYAML, "PORT", "9636"))
		if out, code := fleet(t, d.Host, bin, "--config", in, "firewall", "--chain", "INPUT", "apply"); code != 0 {
			t.Fatalf("apply: exit %d\n%s", code, out)
		}
		for _, f := range families {
			a := f.addr(d)
			dst := a.Published(9636)
			if err := d.Edge.Echo(a.Edge.String(), dst, allowed); err != nil {
				t.Errorf("%s: edge → host:9636: %v", f.name, err)
			}
			if err := d.Stranger.Echo(a.Stranger.String(), dst, dropped); !isTimeout(err) {
				t.Errorf("%s: stranger → host:9636: err = %v, want dropped", f.name, err)
			}
			if err := d.Stranger2.Echo(a.Stranger2.String(), net.JoinHostPort(a.Host2.String(), "9636"), dropped); !isTimeout(err) {
				t.Errorf("%s: stranger on the host's other interface → host:9636: err = %v, want dropped", f.name, err)
			}
			if err := d.Host.Echo("", dst, allowed); err != nil {
				t.Errorf("%s: the host's own connection (loopback path, not ext0): %v", f.name, err)
			}
		}
		if out, code := fleet(t, d.Host, bin, "--config", in, "firewall", "--chain", "INPUT", "check"); code != 0 {
			t.Errorf("check: exit %d\n%s", code, out)
		}
		if out := d.Host.Run("iptables", "-S", "INPUT", "1"); !strings.Contains(out, "-j EDGEFLEET-") {
			t.Errorf("INPUT rule 1 is not our jump:\n%s", out)
		}
	})

	t.Run("watch", func(t *testing.T) {
		cmd := d.Host.Command(bin, "--config", cfg, "firewall", "watch", "--interval", "100ms")
		p := testbed.StartCmd(t, cmd)
		waitFor(t, func() bool {
			return strings.Contains(d.Host.Run("iptables", "-S", "DOCKER-USER", "1"), "-j EDGEFLEET-")
		}, p)
		d.Host.Run("iptables", "-F", "DOCKER-USER")
		waitFor(t, func() bool {
			return strings.Contains(d.Host.Run("iptables", "-S", "DOCKER-USER", "1"), "-j EDGEFLEET-")
		}, p)
		p.Stop()
		if !strings.Contains(p.Output(), "firewall re-applied") {
			t.Errorf("watch output:\n%s", p.Output())
		}
	})
}

func waitFor(t *testing.T, cond func() bool, p *testbed.Proc) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached; watch output:\n%s", p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
