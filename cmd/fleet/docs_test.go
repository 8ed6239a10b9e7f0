package main

import (
	"testing"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestDocDefaults: every key and default the fleet.yaml tables of
// docs/dns-deploy.md state is fleet's.
func TestDocDefaults(t *testing.T) {
	testbed.CheckDocDefaults(t, "docs/dns-deploy.md", "", cli.Defaults(fleetFile{Config: deploy.DefaultConfig(), Log: cli.DefaultLog()}))
}
