package main

import (
	"slices"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestDocExample loads the configuration example of docs/edge.md as the
// binary does: it must load, validate and mean what the page says.
func TestDocExample(t *testing.T) {
	example := testbed.DocBlocks(t, "docs/edge.md", "yaml")[0]
	cfg, err := load(nil, testbed.WriteFile(t, t.TempDir(), "edge.yaml", example))
	if err != nil {
		t.Fatalf("docs/edge.md's example does not load: %v", err)
	}
	if cfg.Name != "edge-par-1" || !slices.Equal(cfg.Listen, []string{":636"}) ||
		len(cfg.Origins) != 2 || cfg.ConnectTimeout != 3*time.Second || cfg.OfflineRetry != time.Minute ||
		cfg.ProxyProtocol != "v2" || cfg.Metrics != "127.0.0.1:9101" || cfg.Log.Format != "json" {
		t.Errorf("the example loads as %+v", cfg)
	}
	testbed.BindAll(t, cfg.Listen)
}

// TestDocDefaults: every key and default docs/edge.md's table states is
// the binary's.
func TestDocDefaults(t *testing.T) {
	testbed.CheckDocDefaults(t, "docs/edge.md", "", cli.Defaults(defaults()))
}
