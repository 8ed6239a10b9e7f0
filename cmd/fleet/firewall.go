package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/edgefleet/edgefleet/firewall"
	"github.com/spf13/cobra"
)

func init() { subcommands = append(subcommands, firewallCommand) }

// firewallFlags are the firewall's options that are not inventory keys.
type firewallFlags struct {
	chain, backend     string
	force, createChain bool
	offline            bool
	interval           time.Duration
}

func firewallCommand() *cobra.Command {
	fl := &firewallFlags{}
	cmd := &cobra.Command{
		Use:   "firewall",
		Short: "let only the edges reach the origin ports (DOCKER-USER or INPUT)",
		Long: `firewall keeps the origin ports of fleet.yaml open to the edges only, in an
own chain EDGEFLEET-<n> jumped from position 1 of DOCKER-USER (published
Docker ports) or INPUT (--chain INPUT, an origin not in Docker), IPv4 and
IPv6, through the iptables backend dockerd uses.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&fl.chain, "chain", firewall.DockerUser, "hook chain: DOCKER-USER or INPUT")
	pf.StringVar(&fl.backend, "backend", "auto", "iptables backend: auto (the one holding DOCKER-USER), nft or legacy")
	pf.BoolVar(&fl.force, "force", false, "apply despite a refusal (bad address, empty edge list, no pin, missing chain)")
	pf.BoolVar(&fl.createChain, "create-chain", false, "create the hook chain when it is missing")
	cmd.AddCommand(firewallPlan(fl), firewallApply(fl), firewallCheck(fl), firewallRemove(fl), firewallWatch(fl), firewallHost(fl))
	return cmd
}

// firewallHost is the far side of an origin host reached over SSH
// (deploy.RemoteFirewall): one request on stdin, the answer on stdout. It
// reads no fleet.yaml: the rules' configuration and the allowed set come
// in the request, computed by the fleet that holds the inventory's lock.
func firewallHost(fl *firewallFlags) *cobra.Command {
	return &cobra.Command{
		Use:    "host",
		Short:  "apply one request of a fleet that reaches this origin host over SSH (stdin, stdout)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fw, err := openFirewall(fl.backend, fl.chain)
			if err != nil {
				return err
			}
			if err := deploy.ServeHost(fw, cmd.InOrStdin(), cmd.OutOrStdout()); err != nil {
				return cli.Exit(1, err)
			}
			return nil
		},
	}
}

func firewallPlan(fl *firewallFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "print the exact rules apply would install",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var p *firewall.Plan
			if fl.offline {
				c, _, err := firewallSetup(cmd, *fl)
				if err != nil {
					return err
				}
				if err := checkBackend(fl.backend); err != nil {
					return err // bad however the plan is made
				}
				if p, err = firewall.NewPlan(c, 1); err != nil {
					return err
				}
			} else {
				f, fw, log, err := firewallInventory(cmd, *fl)
				if err != nil {
					return err
				}
				c, _, err := allowedRules(cmd.Context(), f, fw, *fl, nil, dnsWarning(log))
				if err != nil {
					return err
				}
				if p, err = fw.Plan(c); err != nil {
					return err
				}
			}
			fmt.Fprint(cmd.OutOrStdout(), p.String())
			return nil
		},
	}
	cmd.Flags().BoolVar(&fl.offline, "offline", false, "do not read the live tables: generation 1, both families hooked as configured")
	return cmd
}

func firewallApply(fl *firewallFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "apply",
		Short: "install the rules: build the next generation chain, swap the jump, delete the old chain",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, fw, log, err := firewallInventory(cmd, *fl)
			if err != nil {
				return err
			}
			c, unlock, err := allowedRules(cmd.Context(), f, fw, *fl, deploy.LockState, dnsWarning(log))
			if err != nil {
				return err
			}
			defer unlock()
			p, err := fw.Plan(c)
			if err != nil {
				return err
			}
			for _, w := range p.Warnings {
				log.Warn(w)
			}
			// With the agent's certificate (probe.cert), the edges that
			// get through before are probed again after: a regression
			// puts the previous rules back.
			var probeEdge deploy.ProbeFunc
			var working []string
			saved, err := fw.Save()
			if err != nil {
				return cli.Exit(1, err)
			}
			if f.Probe.Cert != "" {
				if probeEdge, err = probeFunc(f.Config); err != nil {
					return err
				}
				working = deploy.Working(cmd.Context(), probeEdge, f.Probe.Port, f.Edges)
			}
			if err := fw.Apply(p); err != nil {
				return cli.Exit(1, err)
			}
			if err := deploy.Regressed(cmd.Context(), probeEdge, working); err != nil {
				if rerr := fw.Restore(saved); rerr != nil {
					return cli.Exit(1, fmt.Errorf("%w; restoring the previous rules failed too: %w", err, rerr))
				}
				return cli.Exit(1, fmt.Errorf("%w: the previous rules are restored", err))
			}
			for _, f := range p.Families {
				log.Info("firewall applied", "family", f.Name, "chain", p.Chain(), "hook", f.Hook, "rules", len(f.Rules), "backend", fw.Backend())
			}
			return nil
		},
	}
}

func firewallCheck(fl *firewallFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "compare the live rules with the plan: exit 1 and a diff when they differ",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, fw, log, err := firewallInventory(cmd, *fl)
			if err != nil {
				return err
			}
			c, _, err := allowedRules(cmd.Context(), f, fw, *fl, nil, dnsWarning(log))
			if err != nil {
				return err
			}
			rep, err := fw.Check(c)
			if err != nil {
				return err
			}
			if !rep.InSync() {
				fmt.Fprintln(cmd.OutOrStdout(), strings.Join(rep.Diff, "\n"))
				return cli.Exit(1, errors.New("firewall: live rules differ from the plan (fleet firewall apply installs it)"))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "in sync: %s\n", strings.Join(rep.Chains, ", "))
			return nil
		},
	}
}

func firewallRemove(fl *firewallFlags) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "remove",
		Short: "delete every jump and EDGEFLEET chain (the origin ports are open again)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, _, err := loadFleet(cmd)
			if err != nil {
				return err
			}
			fw, err := openFirewall(fl.backend, fl.chain)
			if err != nil {
				return err
			}
			unlock, err := deploy.LockState(statePath(f.path))
			if err != nil {
				return cli.Exit(1, err)
			}
			defer unlock()
			owner := firewallConfig(f.Config, *fl).Owner
			foreign, err := fw.Foreign(owner)
			if err != nil {
				return cli.Exit(1, err)
			}
			if foreign != "" && !fl.force {
				return cli.Exit(1, fmt.Errorf("the firewall holds the rules of inventory %q, not of this one: refusing to remove them (--force removes them)", foreign))
			}
			if needsConfirm(yes, false) {
				if err := confirm(cmd, "remove every edgefleet rule? the origin ports will be open to anyone who reaches them"); err != nil {
					return err
				}
			}
			if err := fw.Remove(); err != nil {
				return cli.Exit(1, err)
			}
			return nil
		},
	}
	yesFlag(cmd, &yes)
	return cmd
}

func firewallWatch(fl *firewallFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "apply, then re-apply whenever the live rules drift (dockerd restarted, chain flushed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, log, err := firewallSetup(cmd, *fl)
			if err != nil {
				return err
			}
			if fl.interval <= 0 {
				return fmt.Errorf("--interval: %v is not positive", fl.interval)
			}
			fw, err := openFirewall(fl.backend, c.Chain)
			if err != nil {
				return err
			}
			// Refusals no wait can cure (an empty edge list, a bad address)
			// stop here; a missing hook chain (dockerd not up yet) is waited
			// for by Watch.
			if _, err := firewall.NewPlan(c, 1); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			// Each round reads fleet.yaml and the state again, under the
			// inventory's lock: a rotation's new or draining edge is never
			// dropped, and a round never runs beside apply or rotate.
			warn := dnsWarning(log)
			src := func() (firewall.Config, func(), error) {
				f, _, err := loadFleet(cmd)
				if err != nil {
					return firewall.Config{}, nil, err
				}
				c, unlock, err := allowedRules(ctx, f, fw, *fl, deploy.TryLockState, warn)
				if errors.Is(err, deploy.ErrLocked) {
					return c, nil, fmt.Errorf("%w: %w", firewall.ErrBusy, err)
				}
				return c, unlock, err
			}
			// With the agent's certificate (probe.cert), each re-apply
			// is checked as firewall apply checks its change: the edges
			// that got through before are probed after, and a regression
			// puts the previous rules back.
			var guard firewall.Guard
			if f, _, err := loadFleet(cmd); err == nil && f.Probe.Cert != "" {
				probeEdge, err := probeFunc(f.Config)
				if err != nil {
					return err
				}
				port := f.Probe.Port
				guard = func(c firewall.Config) func() error {
					var edges []deploy.Edge
					for _, e := range c.Edges {
						edges = append(edges, deploy.Edge{Name: e.Name, IPv4: e.IPv4, IPv6: e.IPv6})
					}
					working := deploy.Working(ctx, probeEdge, port, edges)
					return func() error { return deploy.Regressed(ctx, probeEdge, working) }
				}
			}
			log.Info("firewall watch started", "interval", fl.interval, "backend", fw.Backend(), "hook", c.Chain, "probe", guard != nil)
			return fw.WatchGuarded(ctx, src, fl.interval, log, guard)
		},
	}
	cmd.Flags().DurationVar(&fl.interval, "interval", 5*time.Second, "how often the live rules are compared with the plan")
	return cmd
}

// firewallInventory is firewallSetup, then the iptables backend opened.
func firewallInventory(cmd *cobra.Command, fl firewallFlags) (fleetFile, *firewall.Firewall, *slog.Logger, error) {
	f, log, err := loadFleet(cmd)
	if err != nil {
		return f, nil, nil, err
	}
	if err := checkLocal(f.Config); err != nil {
		return f, nil, nil, err
	}
	c := firewallConfig(f.Config, fl)
	if err := c.Validate(); err != nil {
		return f, nil, nil, err
	}
	if _, err := firewall.NewPlan(c, 1); err != nil {
		return f, nil, nil, err // the inventory's own refusals (an empty edge list…)
	}
	fw, err := openFirewall(fl.backend, c.Chain)
	return f, fw, log, err
}

// dnsWarning logs a DNS server that does not answer once per error: the
// firewall commands go on without what only DNS names.
func dnsWarning(log *slog.Logger) func(error) {
	var last string
	return func(err error) {
		if err.Error() != last {
			log.Warn("dns not read: the allowed set is the inventory's, the state's and the live rules' edges", "err", err)
		}
		last = err.Error()
	}
}

// allowedRules is the rule set every command that writes the firewall
// enforces, computed as apply and rotate compute it: the inventory's
// edges but the withdrawn ones fleet watch dropped (deploy.Allowed), the
// state's draining ones, and every address live in DNS
// (dns.server, when set) or in the firewall that the inventory does not
// list — it stays until a convergence has drained it. With lock (non-nil),
// the inventory's lock is taken first and unlock releases it.
func allowedRules(ctx context.Context, f fleetFile, fw *firewall.Firewall, fl firewallFlags, lock func(string) (func(), error), warn func(error)) (firewall.Config, func(), error) {
	c := firewallConfig(f.Config, fl)
	unlock := func() {}
	if lock != nil {
		u, err := lock(statePath(f.path))
		if err != nil {
			return c, nil, cli.Exit(1, err)
		}
		unlock = u
	}
	fail := func(err error) (firewall.Config, func(), error) {
		unlock()
		return c, nil, cli.Exit(1, err)
	}
	st, err := deploy.LoadState(statePath(f.path))
	if err != nil {
		return fail(err)
	}
	if err := st.Adopt(f.Config, statePath(f.path)); err != nil {
		return fail(err)
	}
	// DNS adds what it answers and the rules do not let in; a server that
	// does not answer adds nothing, and drops nothing either: what DNS
	// published and the rules let in is among the live rules' sources.
	var live deploy.RRSet
	if f.DNS.Server != "" && f.ValidateDNS() == nil {
		pub, err := deploy.NewPublisher(f.Config)
		if err != nil {
			return fail(err)
		}
		if live, err = pub.Read(ctx); err != nil {
			warn(err)
			live = deploy.RRSet{}
		}
	}
	src, err := fw.SourceNames(c.Chain)
	if err != nil {
		return fail(err)
	}
	deploy.Reconcile(f.Config, st, live, src)
	// A withdrawn edge fleet watch dropped stays out (docs/watch.md).
	inv := f.Config
	inv.Edges = deploy.Allowed(f.Config, st)
	c.Edges = firewallConfig(inv, fl).Edges
	for _, name := range st.Sorted() {
		if s := st.Edges[name]; s.State == deploy.StateDraining {
			e := s.Edge(name)
			c.Edges = append(c.Edges, firewall.Edge{Name: e.Name, IPv4: e.IPv4, IPv6: e.IPv6})
		}
	}
	return c, unlock, nil
}

// firewallSetup loads fleet.yaml and turns it into the firewall's Config.
func firewallSetup(cmd *cobra.Command, fl firewallFlags) (firewall.Config, *slog.Logger, error) {
	f, log, err := loadFleet(cmd)
	if err != nil {
		return firewall.Config{}, nil, err
	}
	if err := checkLocal(f.Config); err != nil {
		return firewall.Config{}, nil, err
	}
	c := firewallConfig(f.Config, fl)
	return c, log, c.Validate()
}

// checkLocal refuses a pool none of whose hosts is this one: fleet
// firewall acts on the firewall of the host it runs on.
func checkLocal(inv deploy.Config) error {
	if inv.Pool() && !slices.ContainsFunc(inv.Hosts(), deploy.Origin.Local) {
		return cli.Exit(cli.ExitConfig, errors.New("origins: every host has ssh: fleet firewall acts on the origin host it runs on (the one without ssh)"))
	}
	return nil
}

// firewallConfig maps the inventory onto the firewall's Config. The
// inventory's own Validate is not applied: a bad edge address must reach
// the firewall, which refuses it unless --force (and then skips it).
func firewallConfig(inv deploy.Config, fl firewallFlags) firewall.Config {
	return hostFirewallConfig(inv, localHost(inv), fl)
}

// localHost is the origin host whose firewall is this host's: the one
// origin, or the host of origins without ssh (none: the zero Origin,
// which checkLocal refuses).
func localHost(inv deploy.Config) deploy.Origin {
	for _, h := range inv.Hosts() {
		if h.Local() {
			return h
		}
	}
	return deploy.Origin{}
}

// hostFirewallConfig is firewallConfig for origin host h.
func hostFirewallConfig(inv deploy.Config, h deploy.Origin, fl firewallFlags) firewall.Config {
	c := firewall.Config{
		Chain:       fl.chain,
		Ports:       h.Ports,
		Interface:   h.Interface,
		Address:     h.Address,
		Force:       fl.force,
		CreateChain: fl.createChain,
		Owner:       strings.ToLower(strings.TrimSuffix(inv.Name, ".")),
	}
	for _, e := range inv.Edges {
		c.Edges = append(c.Edges, firewall.Edge{Name: e.Name, IPv4: e.IPv4, IPv6: e.IPv6})
	}
	return c
}

// checkBackend refuses a --backend value that is not one of the three
// (exit 2).
func checkBackend(backend string) error {
	switch backend {
	case "", "auto", firewall.BackendNFT, firewall.BackendLegacy:
		return nil
	}
	return cli.Exit(cli.ExitConfig, fmt.Errorf("--backend %q: want nft, legacy or auto", backend))
}

// openFirewall opens the iptables backend: a --backend value that is not
// one of the three is a bad configuration (exit 2); a backend that cannot be
// used (no binary) is a failure (exit 1).
func openFirewall(backend, chain string) (*firewall.Firewall, error) {
	if err := checkBackend(backend); err != nil {
		return nil, err
	}
	fw, err := firewall.Open(backend, chain)
	if err != nil {
		return nil, cli.Exit(1, err)
	}
	return fw, nil
}
