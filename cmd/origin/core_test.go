package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"fmt"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// buildOrigin builds this command once per test run.
func buildOrigin(t *testing.T) string {
	return testbed.Build(t, "github.com/edgefleet/edgefleet/cmd/origin")
}

func TestMain(m *testing.M) { testbed.Main(m) }

// runWithDLP runs the origin binary with a minimal configuration whose core
// reads the DLP file dlp, and returns what it printed.
func runWithDLP(t *testing.T, bin, dlp string) ([]byte, error) {
	t.Helper()
	dir := t.TempDir()
	cfg := `front:
  listen: ["127.0.0.1:0"]
  inner: 127.0.0.1:1
peers_api: ""
metrics: ""
core:
  listen: 127.0.0.1:0
  config: ldap_proxy.json
`
	for name, data := range map[string]string{"ldap_proxy.json": dlp, "origin.yaml": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "--config", "origin.yaml")
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// A DLP file with errors stops the origin with exit code 19 and one line
// per error naming file, line, column, object and key.
func TestDLPFileErrorsExit19(t *testing.T) {
	bin := buildOrigin(t)
	for _, tc := range []struct {
		name   string
		file   string
		want   []string // each must appear in the output
		errors int      // lines of errors
	}{
		{"connect timeout 0", `[
  {"object": "Defaults", "ConnectTimeout": 0},
  {"object": "LdapServer", "name": "L1", "host": "127.0.0.1", "port": 389},
  {"object": "LdapProxy", "name": "ldapConfiguration", "default": ["L1"]}
]`, []string{`ldap_proxy.json:2:`, `Defaults`, `"ConnectTimeout"`}, 1},
		{"bad port and unknown server", `[
  {"object": "LdapServer", "name": "L1", "host": "127.0.0.1", "port": 70000},
  {"object": "ProxyRule", "ruleType": "UserRouting", "name": "R1", "condition": "(user=*)", "actions": ["forwardto(NOPE)"]},
  {"object": "LdapProxy", "name": "ldapConfiguration", "rules": ["R1"], "default": ["L1"]}
]`, []string{`ldap_proxy.json:2:`, `LdapServer "L1"`, `"port"`, `ldap_proxy.json:3:`, `ProxyRule "R1"`, `NOPE`}, 2},
		{"json syntax", `[
  {"object": "LdapServer", "name": "L1" "host": "x"}
]`, []string{`ldap_proxy.json:2:`}, 1},
		{"load balancer errors", `[
  {"object": "LdapServer", "name": "L1", "host": "127.0.0.1", "port": 389},
  {"object": "LoadBalancer", "name": "LB", "algorithm": "saturation", "routes": [{"server": "L2", "priority": 1}]},
  {"object": "ProxyRule", "ruleType": "UserRouting", "name": "R1", "condition": "(user=*)", "actions": ["balance(LB)"]},
  {"object": "LdapProxy", "name": "ldapConfiguration", "rules": ["R1"]}
]`, []string{`ldap_proxy.json:3:3: LoadBalancer "LB": missing key "threshold"`, `ldap_proxy.json:3:`, `key "routes[1].server": no LdapServer named "L2"`}, 2},
		{"ssl server in proxy mode 1", `[
  {"object": "LdapServer", "name": "S1", "host": "127.0.0.1", "port": 636, "ssl": 1},
  {"object": "LdapProxy", "name": "ldapConfiguration", "default": ["S1"]}
]`, []string{`ldap_proxy.json:2:76:`, `LdapServer "S1"`, `"ssl"`}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runWithDLP(t, bin, tc.file)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != ExitDLP {
				t.Fatalf("exit: %v, want %d\n%s", err, ExitDLP, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			// One line per error, each starting with the file's position.
			var errLines int
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, "origin: ") {
					errLines++
					if !strings.HasPrefix(l, "origin: ldap_proxy.json") || strings.Contains(l, "; ldap_proxy.json") {
						t.Errorf("error line %q is not one error of ldap_proxy.json", l)
					}
				}
			}
			if errLines != tc.errors {
				t.Errorf("%d error lines, want %d:\n%s", errLines, tc.errors, out)
			}
		})
	}
}

// A configuration error that is not the DLP file's is not exit 19, even
// with a DLP file: here the file has no LdapProxy named core.name (plain
// mode) and core.default_server is missing.
func TestPlainModeWithoutDefaultServerIsNotExit19(t *testing.T) {
	bin := buildOrigin(t)
	file := `[
  {"object": "LdapServer", "name": "L1", "host": "127.0.0.1", "port": 389},
  {"object": "LdapProxy", "name": "other", "default": ["L1"]}
]`
	out, err := runWithDLP(t, bin, file)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 || ee.ExitCode() == ExitDLP {
		t.Fatalf("exit: %v, want a failure other than %d\n%s", err, ExitDLP, out)
	}
	if !strings.Contains(string(out), "core.default_server") {
		t.Errorf("output does not name core.default_server:\n%s", out)
	}
}

// originYAML writes the origin.yaml most tests here run with to a fresh
// directory: the front on listen forwarding to inner, with front's
// further keys (YAML lines), the peers API off, the metrics endpoint at
// metrics ("" for none), JSON logs, and the core section's lines core.
func originYAML(t *testing.T, listen, inner, metrics string, front, core []string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "front:\n  listen: [%q]\n  inner: %q\n", listen, inner)
	for _, l := range front {
		b.WriteString("  " + l + "\n")
	}
	fmt.Fprintf(&b, "peers_api: \"\"\nmetrics: %q\nlog:\n  format: json\ncore:\n", metrics)
	for _, l := range core {
		b.WriteString("  " + l + "\n")
	}
	return testbed.WriteFile(t, t.TempDir(), "origin.yaml", b.String())
}
