package deploy

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestRenderMetricsToken: with deploy.metrics_token_file and
// metrics_allow, the rendering installs the token root-only, the unit
// hands it to the edge as a credential, the edge's configuration names it
// (for --check) and cloud-init accepts the metrics port from the allowed
// hosts only; byte for byte, and systemd-analyze verify accepts the unit.
func TestRenderMetricsToken(t *testing.T) {
	c := deployConfig()
	c.Deploy.Metrics = "0.0.0.0:9101"
	c.Deploy.MetricsTokenFile = testbed.WriteFile(t, t.TempDir(), "metrics.token", "edge-metrics-token-0123456789\n")
	c.Deploy.MetricsAllow = []string{"203.0.113.0/24", "2001:db8:1::5"}
	r, err := Render(c, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	if string(r.MetricsToken) != "edge-metrics-token-0123456789\n" {
		t.Errorf("token %q", r.MetricsToken)
	}
	golden(t, "edge-1-token.user-data", string(r.UserData))
	golden(t, "edge-1-token.service", string(r.Unit))
	golden(t, "edge-1-token.edge.yaml", string(r.EdgeConfig))
	if out, err := inUnitNamespace(t, r.Unit, "verify"); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("systemd-analyze verify of the unit with the credential: %v\n%s", err, out)
	}

	c.Deploy.MetricsTokenFile = testbed.WriteFile(t, t.TempDir(), "short.token", "abc\n")
	if _, err := Render(c, "edge-1"); err == nil || !strings.Contains(err.Error(), "deploy.metrics_token_file: ") {
		t.Errorf("a 3-character token rendered: %v", err)
	}
	c.Deploy.MetricsTokenFile = ""
	c.Deploy.MetricsAllow = []string{"operator.example.net"}
	if _, err := Render(c, "edge-1"); err == nil || err.Error() != `deploy.metrics_allow: "operator.example.net" is not a CIDR or an IP address` {
		t.Errorf("a host name in metrics_allow: %v", err)
	}
}

// TestScrapeSendsToken: our edge with metrics_token_file answers fleet's
// Scrape, which sends deploy.metrics_token_file's token; ScrapeConns
// without it gets 401.
func TestScrapeSendsToken(t *testing.T) {
	dir := t.TempDir()
	token := testbed.WriteFile(t, dir, "metrics.token", "edge-metrics-token-0123456789\n")
	addr, metrics := testbed.FreeAddr(t, "127.0.0.1"), testbed.FreeAddr(t, "127.0.0.1")
	conf := testbed.WriteFile(t, dir, "edge.yaml", "name: e1\nlisten: ['"+addr+"']\norigins: ['"+testbed.EchoTCP(t)+"']\nmetrics: '"+metrics+
		"'\nmetrics_token_file: "+filepath.Join(dir, "metrics.token")+"\n")
	testbed.Start(t, edgeBinary(t), "--config", conf)
	testbed.WaitTCP(t, metrics, 10*time.Second)
	ctx := context.Background()
	if _, err := ScrapeConns(ctx, metrics); err == nil || !strings.Contains(err.Error(), "401 Unauthorized") {
		t.Errorf("without the token: %v, want 401", err)
	}
	n, err := Deploy{MetricsTokenFile: token}.Scrape()(ctx, metrics)
	if err != nil || n != 0 {
		t.Errorf("with the token: %d, %v; want 0 active connections", n, err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		defer c.Close()
		scrape := Deploy{MetricsTokenFile: token}.Scrape()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if n, err = scrape(ctx, metrics); n == 1 {
				break
			}
		}
		if n != 1 {
			t.Errorf("with a client connected: %d, %v; want 1", n, err)
		}
	}
}
