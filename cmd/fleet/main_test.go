package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

func TestLoadFleet(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, wantErr string
		check               func(fleetFile) bool
	}{
		{name: "full", yaml: `name: ldap.example.net
zone: example.net
ttl: 30
dns: {server: "192.0.2.53:53", tsig: {name: fleet-key, algorithm: hmac-sha256, secret_file: key.b64}}
origin: {ports: [8636, 636], interface: eth0, address: 192.0.2.2}
edges:
  - {name: edge-1, ipv4: 203.0.113.10, ipv6: "2001:db8::10", ssh: "root@203.0.113.10:22", host_key: "ssh-ed25519 AAAA"}
  - {name: edge-2, ipv4: 203.0.113.11}
log: {format: json}
`, check: func(f fleetFile) bool {
			return f.TTL == 30 && len(f.Edges) == 2 && f.Edges[0].HostKey == "ssh-ed25519 AAAA" && f.Edges[1].IPv6 == "" &&
				len(f.Origin.Ports) == 2 && filepath.IsAbs(f.DNS.TSIG.SecretFile) && filepath.Base(f.DNS.TSIG.SecretFile) == "key.b64" && f.Log.Format == "json" && f.Validate() == nil
		}},
		{name: "defaults", yaml: "name: ldap.example.net\n", check: func(f fleetFile) bool {
			return f.TTL == 60 && f.Origin.Ports[0] == 8636 && f.DNS.TSIG.Algorithm == "hmac-sha256" && len(f.Edges) == 0
		}},
		{name: "unknown top key", yaml: "edgez: []\n", wantErr: `unknown key "edgez"`},
		{name: "unknown origin key", yaml: "origin: {iface: eth0}\n", wantErr: `unknown key "origin.iface"`},
		{name: "unknown edge key", yaml: "edges: [{name: e, ipv5: x}]\n", wantErr: "ipv5"},
		{name: "bad log format", yaml: "log: {format: xml}\n", wantErr: `log.format: "xml" is not json or text`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fleet.yaml")
			os.WriteFile(path, []byte(tc.yaml), 0o600)
			// secret_file is read relative to fleet.yaml's directory.
			os.WriteFile(filepath.Join(filepath.Dir(path), "key.b64"), []byte("c2VjcmV0\n"), 0o600)
			cmd := newRoot()
			cmd.SetArgs([]string{"--config", path})
			cmd.ParseFlags([]string{"--config", path})
			f, _, err := loadFleet(cmd)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(f) {
				t.Fatalf("loaded %+v", f)
			}
		})
	}
}

// TestBadBackendIsConfigError: a --backend that is not nft, legacy or auto
// is a bad configuration (exit 2), never mistaken for a rule diff (exit 1).
func TestBadBackendIsConfigError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	os.WriteFile(path, []byte("name: ldap.example.net\norigin: {interface: eth0}\nedges: [{name: e1, ipv4: 203.0.113.10}]\n"), 0o600)
	for _, sub := range []string{"plan", "plan --offline", "apply", "check", "remove"} {
		cmd := newRoot()
		cmd.SetArgs(append([]string{"--config", path, "firewall"}, append(strings.Fields(sub), "--backend", "bogus")...))
		err := cmd.Execute()
		var ee *cli.ExitError
		if !errors.As(err, &ee) || ee.Code != 2 || !strings.Contains(err.Error(), `--backend "bogus"`) {
			t.Errorf("%s: err = %v, want exit 2 naming --backend", sub, err)
		}
	}
}

// TestInvalidInventories loads each testdata/invalid-*.yml and validates
// it: the error must be exactly the one in testdata/invalid.golden
// (regenerate with -update). `origin.ports: [true]` is an error, not
// rules for port 1 that would leave the real port open.
func TestInvalidInventories(t *testing.T) {
	testbed.InvalidConfigs(t, *update, func(path string) error {
		cmd := newRoot()
		cmd.ParseFlags([]string{"--config", path})
		inv, _, err := loadFleet(cmd)
		if err == nil {
			err = inv.Validate()
		}
		return err
	})
}

var update = flag.Bool("update", false, "rewrite testdata/invalid.golden")

// TestDocInventory: the fleet.yaml of docs/dns-deploy.md loads and passes
// the checks publishing needs, and the documented fleet dns sessions print
// what the document shows, run against the embedded server.
func TestDocInventory(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "dns-deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\n")
	yml, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/dns-deploy.md has no yaml block")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(path, []byte(yml), 0o600)
	os.WriteFile(filepath.Join(dir, "fleet.key"), []byte("key \"fleet-key\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0\";\n};\n"), 0o600)
	cmd := newRoot()
	cmd.ParseFlags([]string{"--config", path})
	f, _, err := loadFleet(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ValidateDNS(); err != nil || len(f.Edges) != 2 || f.TTL != 60 {
		t.Fatalf("the documented inventory: %v (%+v)", err, f.Config)
	}

	testbed.Need(t, "dig")
	server := lowAddr(t)
	t.Setenv("EDGEFLEET_DNS_SERVER", server) // the documented port may be taken
	testbed.Start(t, fleetBin(t), "--config", path, "dns", "serve")
	waitDNS(t, server)
	sessions := regexp.MustCompile("(?s)```\n(\\$ fleet dns (?:plan|apply|list).*?)```").FindAllStringSubmatch(string(b), -1)
	if len(sessions) < 3 {
		t.Fatalf("docs/dns-deploy.md shows %d fleet dns sessions, want plan, apply and list", len(sessions))
	}
	for _, sess := range sessions {
		cmds := strings.Split(sess[1], "$ ")[1:]
		for _, c := range cmds {
			line, want, _ := strings.Cut(c, "\n")
			args := append(strings.Fields(line)[1:], "--config", path)
			r := fleetRun(t, nil, args...)
			if r.code != 0 || r.stdout != want {
				t.Errorf("%s: exit %d\n%s%s\nthe document shows:\n%s", line, r.code, r.stdout, r.stderr, want)
			}
		}
	}
}

// TestGroupNeedsACommand: `fleet dns lst` (a typo) or a bare `fleet dns`
// is a usage error, exit 2, not the help and success.
func TestGroupNeedsACommand(t *testing.T) {
	for args, want := range map[string]string{
		"dns lst":        `unknown command "lst" for "fleet dns" (did you mean list?)`,
		"firewall bogus": `unknown command "bogus" for "fleet firewall"`,
		"aply":           `unknown command "aply" for "fleet" (did you mean apply?)`,
		"deploy":         `a command is required for "fleet deploy"`,
		"dns":            `a command is required for "fleet dns"`,
	} {
		root := newRoot()
		root.SetArgs(strings.Fields(args))
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		var ee *cli.ExitError
		if !errors.As(err, &ee) || ee.Code != cli.ExitConfig || err.Error() != want {
			t.Errorf("fleet %s: %v, want exit %d and %q", args, err, cli.ExitConfig, want)
		}
	}
}

// TestUsageErrorsOneLine: the fleet binary's usage errors are one line
// on stderr and exit 2 — a misspelt command with cobra's suggestion (not
// its multi-line text joined by "; "), and an inventory without edges for
// the commands that would publish it, found before any peer is asked (the
// DNS server here does not exist).
func TestUsageErrorsOneLine(t *testing.T) {
	oneLineFailure(t, "aply", fleetRun(t, nil, "aply"), 2, `fleet: unknown command "aply" for "fleet" (did you mean apply?)`)
	oneLineFailure(t, "dns serv", fleetRun(t, nil, "dns", "serv"), 2, `fleet: unknown command "serv" for "fleet dns" (did you mean serve?)`)
	inv := testbed.WriteFile(t, t.TempDir(), "fleet.yaml", "name: ldap.example.test\nzone: example.test\n"+
		"dns: {server: \"127.0.0.1:1\", tsig: {name: k, algorithm: hmac-sha256, secret: c2VjcmV0}}\nedges: []\n")
	for _, args := range [][]string{{"apply", "--no-firewall"}, {"apply", "--no-firewall", "--dry-run"}, {"dns", "plan"}, {"dns", "apply"}} {
		r := fleetRun(t, nil, append([]string{"--config", inv}, args...)...)
		oneLineFailure(t, strings.Join(args, " "), r, 2, "fleet.yaml lists no edge: refusing to leave ldap.example.test without any address")
	}
}

// TestTrustedEdges: front.trusted_edges is read from the origin's file:
// CIDRs, single addresses, IPv4-mapped prefixes as their IPv4 twin; a bad
// entry names the file.
func TestTrustedEdges(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "origin.yaml")
	os.WriteFile(path, []byte("front:\n  listen: \":8636\"\n  trusted_edges: [\"10.77.0.0/24\", \"198.51.100.7\", \"::ffff:10.1.0.0/112\", \"2001:db8::/32\"]\ncore: {}\n"), 0o600)
	got, err := trustedEdges(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "[10.77.0.0/24 198.51.100.7/32 10.1.0.0/16 2001:db8::/32]"
	if fmt.Sprint(got) != want {
		t.Errorf("got %v, want %s", got, want)
	}
	if p, err := trustedEdges(""); p != nil || err != nil {
		t.Errorf("no file: %v %v", p, err)
	}
	os.WriteFile(path, []byte("front: {trusted_edges: [\"10.77.0.300\"]}\n"), 0o600)
	if _, err := trustedEdges(path); err == nil || !strings.Contains(err.Error(), `front.trusted_edges: "10.77.0.300" is not a CIDR or an IP address`) {
		t.Errorf("bad entry: %v", err)
	}
}
