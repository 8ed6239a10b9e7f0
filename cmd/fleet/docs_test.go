package main

import (
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/spf13/cobra"
)

// TestDocDefaults: every key and default the fleet.yaml tables of
// docs/dns-deploy.md state is fleet's.
func TestDocDefaults(t *testing.T) {
	testbed.CheckDocDefaults(t, "docs/dns-deploy.md", "", cli.Defaults(fleetFile{Config: deploy.DefaultConfig(), Log: cli.DefaultLog()}))
	testbed.CheckDocDefaults(t, "docs/watch.md", "", cli.Defaults(fleetFile{Config: deploy.DefaultConfig(), Log: cli.DefaultLog()}))
}

// TestDocFlagDefaults: every flag the "| flag | default |" tables of
// docs/firewall.md (fleet firewall …) and docs/dns-deploy.md (apply,
// rotate, status) name exists on those commands with that default
// (`plan --offline` names a subcommand's flag).
func TestDocFlagDefaults(t *testing.T) {
	var all []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		all = append(all, c)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot())
	scope := map[string]func(path string) bool{
		"docs/firewall.md": func(p string) bool { return strings.HasPrefix(p, "fleet firewall") },
		"docs/dns-deploy.md": func(p string) bool {
			return p == "fleet apply" || p == "fleet rotate" || p == "fleet status"
		},
	}
	for doc, in := range scope {
		inTable := false
		for line := range strings.Lines(testbed.Doc(t, doc)) {
			cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
			for i := range cells {
				cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
			}
			switch {
			case !strings.HasPrefix(line, "|"):
				inTable = false
				continue
			case len(cells) >= 2 && cells[0] == "flag" && cells[1] == "default":
				inTable = true
				continue
			case !inTable || strings.HasPrefix(cells[0], "---"):
				continue
			}
			sub, name, _ := strings.Cut(cells[0], "--")
			sub, name = strings.TrimSpace(sub), strings.Fields(name)[0]
			found := false
			for _, c := range all {
				if !in(c.CommandPath()) || sub != "" && c.Name() != sub {
					continue
				}
				f := c.Flags().Lookup(name)
				if f == nil {
					f = c.PersistentFlags().Lookup(name)
				}
				if f == nil {
					continue
				}
				found = true
				if f.DefValue != cells[1] {
					t.Errorf("%s: %s: the table says %q, %q defaults to %q", doc, cells[0], cells[1], c.CommandPath(), f.DefValue)
				}
			}
			if !found {
				t.Errorf("%s: %s: no fleet command has this flag", doc, cells[0])
			}
		}
	}
}
