package main

import (
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestDocExamples loads the origin.yaml examples of docs/origin.md and
// docs/ldap-core.md as the binary does: each must load, its front section
// validate, and its values be the ones the page explains.
func TestDocExamples(t *testing.T) {
	loadDoc := func(doc string) originFile {
		t.Helper()
		path := testbed.WriteFile(t, t.TempDir(), "origin.yaml", testbed.DocBlocks(t, doc, "yaml")[0])
		cfg, err := load(nil, path)
		if err != nil {
			t.Fatalf("%s's example does not load: %v", doc, err)
		}
		testbed.BindAll(t, cfg.Front.Listen) // binds on this host as it is, each port made a free one
		return cfg
	}
	front := loadDoc("docs/origin.md")
	if f := front.Front; len(f.TrustedEdges) != 3 || f.Untrusted != "reject" || !f.RequireHeader ||
		f.HeaderTimeout != 5*time.Second || front.PeersAPI != "127.0.0.1:9103" || front.Metrics != "127.0.0.1:9102" {
		t.Errorf("docs/origin.md's example loads as %+v", front)
	}
	core := loadDoc("docs/ldap-core.md").Core
	if core.Config != "/etc/edgefleet/ldap_proxy.json" || core.TLS.Mode != "mtls" ||
		core.TLS.Pins != "/etc/edgefleet/agents.pins" || !core.Enabled || core.ProxyMode != 1 ||
		core.MaxPending != 100 || core.WriteTimeout != time.Minute || core.PDUTimeout != 30*time.Second {
		t.Errorf("docs/ldap-core.md's example loads as %+v", core)
	}
}

// TestDocDefaults: every key and default the tables of docs/origin.md and
// docs/ldap-core.md (whose keys are under core:) state is the binary's.
func TestDocDefaults(t *testing.T) {
	d := cli.Defaults(defaults())
	testbed.CheckDocDefaults(t, "docs/origin.md", "", d)
	testbed.CheckDocDefaults(t, "docs/ldap-core.md", "core", d)
}
