package deploy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestRenderEdgeMetrics: the rendered edge listens for metrics where
// edges[].metrics says fleet reads them (host:port, http://host:port,
// http://host:port/metrics); without one, or behind a proxy (https,
// another path), where deploy.metrics says.
func TestRenderEdgeMetrics(t *testing.T) {
	for _, tc := range []struct{ edge, want string }{
		{"", "127.0.0.1:9101"},
		{"203.0.113.10:9101", "203.0.113.10:9101"},
		{"http://203.0.113.10:9101", "203.0.113.10:9101"},
		{"http://[2001:db8::10]:9101/metrics", "[2001:db8::10]:9101"},
		{"https://metrics.example.net/edge-1", "127.0.0.1:9101"},
		{"http://203.0.113.10:9101/other", "127.0.0.1:9101"},
	} {
		c := deployConfig()
		c.Edges[0].Metrics = tc.edge
		r, err := Render(c, "edge-1")
		if err != nil {
			t.Fatal(err)
		}
		if want := "\nmetrics: \"" + tc.want + "\"\n"; !strings.Contains(string(r.EdgeConfig), want) {
			t.Errorf("edges[].metrics %q: edge.yaml\n%swant %q", tc.edge, r.EdgeConfig, strings.TrimSpace(want))
		}
	}
}

// TestRenderedEdgeDrainReadable: the edge binary started on the rendered
// edge.yaml serves its metrics at edges[].metrics, so fleet reads its
// active connections there (ScrapeConns) — the read a drain waits on.
func TestRenderedEdgeDrainReadable(t *testing.T) {
	c := deployConfig()
	c.Edges[0].Metrics = testbed.FreeAddr(t, "127.0.0.2")
	listen := testbed.FreeAddr(t, "127.0.0.2")
	c.Deploy.Listen = []string{listen}
	r, err := Render(c, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	conf := testbed.WriteFile(t, t.TempDir(), "edge.yaml", string(r.EdgeConfig))
	p := testbed.Start(t, edgeBinary(t), "--config", conf)
	testbed.WaitTCP(t, listen, 15*time.Second)
	var n int
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// WaitTCP's own connection counts until the edge has closed it.
		if n, err = ScrapeConns(context.Background(), c.Edges[0].Metrics); err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fleet cannot read a drained edge at %s: %d active, %v\n%s", c.Edges[0].Metrics, n, err, p.Output())
		}
	}
}
