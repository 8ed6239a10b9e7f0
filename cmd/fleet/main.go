// Command fleet runs fleet operations on the inventory in fleet.yaml:
// firewall, dns, deploy, the convergence commands apply, rotate and
// status, and the Prometheus exporter (one file each).
//
//	fleet --config fleet.yaml firewall plan
//	fleet --config fleet.yaml firewall check   # exit 1 and a diff when the live rules differ
//	fleet --config fleet.yaml dns plan         # the RFC 2136 UPDATEs apply would send
//	fleet --config fleet.yaml apply            # firewall, probe, DNS, wait, drain, firewall
//	fleet --config fleet.yaml rotate --out e1 --in e3=203.0.113.13
//	fleet --config fleet.yaml status
//	fleet --config fleet.yaml watch            # withdraw failing edges from DNS, restore recovered ones
//	fleet --config fleet.yaml exporter         # /metrics: the DNS set against the inventory
//
// See docs/firewall.md, docs/dns-deploy.md and docs/watch.md.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/spf13/cobra"
)

// subcommands are added to the root by each command's file (firewall.go,
// and later dns.go, deploy.go, rotate.go) from an init function.
var subcommands []func() *cobra.Command

// fleetFile is fleet.yaml: the inventory plus the log section.
type fleetFile struct {
	deploy.Config `mapstructure:",squash"`
	Log           cli.Log `mapstructure:"log"`

	path string // the file read ("" when none)
}

// rel makes the inventory's file names relative to its own directory, as
// an operator writing "secret_file: fleet.key" beside fleet.yaml means.
func (f *fleetFile) rel() {
	if f.path == "" {
		return
	}
	dir := filepath.Dir(f.path)
	paths := []*string{&f.DNS.TSIG.SecretFile, &f.Probe.CA, &f.Probe.Cert, &f.Probe.Key, &f.Origin.Config}
	for i := range f.Origins {
		paths = append(paths, &f.Origins[i].Config)
	}
	for _, p := range paths {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// defaultConfigPath is read when --config is not given and it exists.
const defaultConfigPath = "fleet.yaml"

// loadFleet reads fleet.yaml (strictly: unknown keys are errors), the
// EDGEFLEET_* environment and the command's flags.
func loadFleet(cmd *cobra.Command) (fleetFile, *slog.Logger, error) {
	f := fleetFile{Config: deploy.DefaultConfig(), Log: cli.DefaultLog()}
	path, _ := cmd.Flags().GetString("config")
	if path == "" {
		if _, err := os.Stat(defaultConfigPath); err == nil {
			path = defaultConfigPath
		}
	}
	if err := cli.Load(cmd.Flags(), path, &f); err != nil {
		return f, nil, err
	}
	f.path = path
	f.rel()
	if err := f.Log.Validate(); err != nil {
		return f, nil, err
	}
	return f, cli.Logger(f.Log, os.Stderr), nil
}

func newRoot() *cobra.Command {
	root := cli.Root("fleet", "fleet operations: firewall, DNS, deploy, rotate")
	root.RunE = func(cmd *cobra.Command, args []string) error {
		cmd.Usage()
		return cli.Exit(cli.ExitConfig, errors.New("a command is required"))
	}
	// cobra's own message spans lines ("…\n\nDid you mean this?\n\tapply\n"),
	// which a one-line error turns into "…; ; Did you mean this?; \tapply; ".
	root.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return unknownCommand(cmd, args[0])
		}
		return nil
	}
	for _, add := range subcommands {
		root.AddCommand(add())
	}
	groupsNeedACommand(root)
	return root
}

// groupsNeedACommand makes every command that only groups others (fleet
// dns, fleet firewall, fleet deploy) fail on a missing or misspelt
// subcommand: cobra would print the help and exit 0, so `fleet dns lst`
// in a script would pass for done.
func groupsNeedACommand(c *cobra.Command) {
	for _, sub := range c.Commands() {
		groupsNeedACommand(sub)
	}
	if c.HasParent() && c.HasSubCommands() && !c.Runnable() {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(cmd, args[0])
			}
			cmd.Usage()
			return cli.Exit(cli.ExitConfig, fmt.Errorf("a command is required for %q", cmd.CommandPath()))
		}
	}
}

// unknownCommand is the one-line usage error for a misspelt subcommand
// of c, with cobra's suggestions: unknown command "aply" for "fleet"
// (did you mean apply?).
func unknownCommand(c *cobra.Command, arg string) error {
	msg := fmt.Sprintf("unknown command %q for %q", arg, c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's default, set only by its own path
	}
	if s := c.SuggestionsFor(arg); len(s) > 0 {
		msg += " (did you mean " + strings.Join(s, " or ") + "?)"
	}
	return cli.Exit(cli.ExitConfig, errors.New(msg))
}

// needEdges refuses an inventory without edges for the commands that
// publish it (apply, dns plan|apply): converging to it would leave name
// without any address and let no edge reach the origin. It is a bad
// fleet.yaml, exit 2, found before any peer is asked.
func needEdges(f fleetFile) error {
	if len(f.Edges) == 0 {
		return cli.Exit(cli.ExitConfig, fmt.Errorf("fleet.yaml lists no edge: refusing to leave %s without any address and the origin ports closed to every edge", f.Name))
	}
	return nil
}

func main() {
	if err := newRoot().Execute(); err != nil {
		cli.Die("fleet", err) // a bad configuration is one line
	}
}

// statePath is fleet.state.json beside the inventory.
func statePath(inventory string) string {
	if inventory == "" {
		return deploy.StateFile
	}
	return filepath.Join(filepath.Dir(inventory), deploy.StateFile)
}
