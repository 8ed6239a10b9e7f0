package main

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/deploy/monitoring"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestMetricsExported runs the origin binary with its front and a DLP-mode
// core in front of a real slapd, sends one ldapsearch through the front,
// and scrapes /metrics: every family deploy/monitoring lists for the origin
// (the names its alerts and dashboard use) is there with its type.
func TestMetricsExported(t *testing.T) {
	testbed.Need(t, "ldapsearch")
	slapd := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})[0]
	host, port, _ := net.SplitHostPort(slapd.Addr)
	bin := buildOrigin(t)
	front := testbed.FreeAddr(t, "127.0.0.1")
	core := testbed.FreeAddr(t, "127.0.0.1")
	metrics := testbed.FreeAddr(t, "127.0.0.1")
	dir := t.TempDir()
	dlp := testbed.WriteFile(t, dir, "ldap_proxy.json", fmt.Sprintf(`[
  {"object": "LdapServer", "name": "L1", "host": %q, "port": %s},
  {"object": "LdapProxy", "name": "ldapConfiguration", "default": ["L1"]}
]`, host, port))
	cfg := testbed.WriteFile(t, dir, "origin.yaml", fmt.Sprintf(`front:
  listen: [%q]
  inner: %q
peers_api: ""
metrics: %q
core:
  listen: %q
  config: %q
`, front, core, metrics, core, dlp))
	testbed.Start(t, bin, "--config", cfg)
	testbed.WaitTCP(t, front, 10*time.Second)
	testbed.WaitTCP(t, metrics, 10*time.Second)

	out, err := exec.Command("ldapsearch", "-x", "-LLL", "-o", "nettimeout=10", "-H", "ldap://"+front,
		"-b", "", "-s", "base", "(objectClass=*)", "namingContexts").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "namingContexts: "+testbed.Suffix) {
		t.Fatalf("ldapsearch through the front: %v\n%s", err, out)
	}

	var body string
	deadline := time.Now().Add(10 * time.Second)
	for {
		body = testbed.Scrape(t, metrics)
		// The operation's counter is added when its answer has been sent.
		if strings.Contains(body, `edgefleet_core_operations_total{op="search",result="success",server="L1"}`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for name, typ := range monitoring.Exported["origin"] {
		if !strings.Contains(body, "\n# TYPE "+name+" "+typ+"\n"+name) {
			t.Errorf("/metrics lacks %s %s with a sample", typ, name)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}
