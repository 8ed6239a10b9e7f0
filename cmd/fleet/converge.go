package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/edgefleet/edgefleet/firewall"
	"github.com/edgefleet/edgefleet/internal/safefile"
	"github.com/edgefleet/edgefleet/probe"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

func init() {
	subcommands = append(subcommands, applyCommand, rotateCommand, statusCommand)
}

// convergeFlags are the options of apply, rotate and status that are not
// inventory keys.
type convergeFlags struct {
	fw            firewallFlags
	noFW          bool
	dryRun        bool
	allowLoopback bool
	slack         time.Duration
	every         time.Duration
	timeout       time.Duration
	output        string // apply: text or json
	yes           bool   // apply, rotate: no confirmation on a terminal
}

func (fl *convergeFlags) register(fs *pflag.FlagSet, withDryRun bool) {
	fs.StringVar(&fl.fw.chain, "chain", firewall.DockerUser, "firewall hook chain: DOCKER-USER or INPUT (an origin not in Docker)")
	fs.StringVar(&fl.fw.backend, "backend", "auto", "iptables backend: auto, nft or legacy")
	fs.BoolVar(&fl.fw.createChain, "create-chain", false, "create the hook chain when it is missing")
	fs.BoolVar(&fl.noFW, "no-firewall", false, "leave the firewall alone: no steps 1 and 6 (development, an origin without one)")
	fs.DurationVar(&fl.timeout, "timeout", 5*time.Second, "bound on each exchange with the DNS server")
	if withDryRun {
		fs.BoolVar(&fl.dryRun, "dry-run", false, "print what would be done, change nothing")
		fs.DurationVar(&fl.slack, "slack", 5*time.Second, "added to the TTL a removed edge waits for")
		fs.DurationVar(&fl.every, "progress", 5*time.Second, "how often a wait prints its progress")
		fs.BoolVar(&fl.allowLoopback, "allow-loopback", false, "accept loopback edge addresses (a fleet on one machine: the demo)")
	}
}

// check refuses flag values no run could use (exit 2).
func (fl convergeFlags) check() error {
	if fl.slack < 0 {
		return cli.Exit(cli.ExitConfig, fmt.Errorf("--slack %v: must not be negative", fl.slack))
	}
	if fl.every <= 0 {
		return cli.Exit(cli.ExitConfig, fmt.Errorf("--progress %v: must be positive", fl.every))
	}
	return nil
}

// checkEdges refuses an address that must never be an edge (exit 2); with
// the firewall managed, fleet runs on the origin host, whose own
// addresses are refused too.
func checkEdges(cfg deploy.Config, fl convergeFlags) error {
	var own []netip.Addr
	if !fl.noFW {
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil {
					own = append(own, p.Addr())
				}
			}
		}
	}
	if err := cfg.CheckEdgeAddrs(fl.allowLoopback, own); err != nil {
		return cli.Exit(cli.ExitConfig, err)
	}
	return nil
}

// fleetParts are the live peers convergence and status talk to.
type fleetParts struct {
	f        fleetFile
	pub      *deploy.Publisher
	fw       deploy.Firewall
	iptables *firewall.Firewall // nil with --no-firewall
	probe    deploy.ProbeFunc
}

// setupFleet loads the inventory and opens DNS, the firewall and the probe.
func setupFleet(cmd *cobra.Command, fl convergeFlags) (fleetParts, error) {
	var p fleetParts
	var err error
	if p.f, p.pub, err = dnsSetup(cmd, fl.timeout); err != nil {
		return p, err
	}
	if !fl.noFW {
		if p.fw, err = poolFirewall(&p, fl.fw); err != nil {
			return p, err
		}
	}
	p.probe, err = probeFunc(p.f.Config)
	return p, err
}

// poolFirewall opens every origin host's firewall: the single origin's,
// or a Pool of each host of origins — the local one through iptables
// here, each other one over SSH (deploy.RemoteFirewall, running `fleet
// firewall host` there).
func poolFirewall(p *fleetParts, fl firewallFlags) (deploy.Firewall, error) {
	inv := p.f.Config
	var pool deploy.Pool
	for _, h := range inv.Hosts() {
		fc := hostFirewallConfig(inv, h, fl)
		if err := fc.Validate(); err != nil {
			if inv.Pool() {
				err = fmt.Errorf("origin %s: %w", h.Name, err)
			}
			return nil, err
		}
		if !h.Local() {
			r, err := remoteFirewall(inv, h, fc, fl)
			if err != nil {
				return nil, cli.Exit(cli.ExitConfig, fmt.Errorf("origin %s: %w", h.Name, err))
			}
			pool = append(pool, deploy.HostFirewall{Name: h.Name, Firewall: r})
			continue
		}
		fw, err := openFirewall(fl.backend, fc.Chain)
		if err != nil {
			return nil, err
		}
		p.iptables = fw
		if !inv.Pool() {
			return deploy.IPTables{FW: fw, Base: fc}, nil
		}
		pool = append(pool, deploy.HostFirewall{Name: h.Name, Firewall: deploy.IPTables{FW: fw, Base: fc}})
	}
	return pool, nil
}

// remoteFirewall is origin host h's firewall over SSH, logged in with
// deploy.identity (or the ssh-agent) as fleet deploy push is; the far
// side runs with this command's --backend and --chain.
func remoteFirewall(inv deploy.Config, h deploy.Origin, fc firewall.Config, fl firewallFlags) (*deploy.RemoteFirewall, error) {
	auth, _, err := sshAuth(inv.Deploy.Identity) // the agent's connection lives as long as the command
	if err != nil {
		return nil, err
	}
	bin := h.Fleet
	if bin == "" {
		bin = "fleet"
	}
	backend := fl.backend
	if backend == "" {
		backend = "auto"
	}
	command := shellJoin(bin, "firewall", "host", "--backend", backend, "--chain", fc.Chain)
	return deploy.NewRemoteFirewall(h, fc, command, auth, 0)
}

// shellJoin quotes each word for the remote shell.
func shellJoin(words ...string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// probeFunc is the end-to-end probe through an edge, as the inventory's
// probe section configures it.
func probeFunc(cfg deploy.Config) (deploy.ProbeFunc, error) {
	serverName := cfg.Probe.ServerName
	if serverName == "" {
		serverName = strings.TrimSuffix(cfg.Name, ".")
	}
	conf, err := probe.ClientTLS(cfg.Probe.CA, cfg.Probe.Cert, cfg.Probe.Key, serverName)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	budget := cfg.Probe.Budget
	return func(ctx context.Context, addr string) deploy.ProbeResult {
		r := probe.Probe(ctx, addr, conf, budget)
		return deploy.ProbeResult{OK: r.OK, HandshakeMS: r.TLSHandshakeMS, Error: r.Error}
	}, nil
}

// converge runs the six steps for cfg until done, SIGINT or SIGTERM;
// locked says the caller holds the state lock; beforePublish (may be nil)
// runs once the new edges passed their probes.
func converge(cmd *cobra.Command, p fleetParts, cfg deploy.Config, fl convergeFlags, locked bool, beforePublish func() error) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	trustedFrom := ""
	for _, h := range cfg.Hosts() { // the first origin host's that names one
		if trustedFrom = h.Config; trustedFrom != "" {
			break
		}
	}
	trusted, err := trustedEdges(trustedFrom)
	if err != nil {
		return cli.Exit(cli.ExitConfig, err)
	}
	out := cmd.OutOrStdout()
	var steps *stepLines
	if fl.output == "json" {
		steps = &stepLines{echo: cmd.ErrOrStderr()}
		out = steps
	}
	c := &deploy.Converger{
		Trusted: trusted, TrustedFrom: trustedFrom,
		Config: cfg, StatePath: statePath(p.f.path),
		DNS: p.pub, Firewall: p.fw, Probe: p.probe, Conns: cfg.Deploy.Scrape(),
		Slack: fl.slack, DryRun: fl.dryRun, Locked: locked, Out: out, Every: fl.every,
		BeforePublish: beforePublish,
	}
	err = c.Run(ctx)
	if steps != nil {
		if rerr := reportApply(cmd.Context(), cmd.OutOrStdout(), steps, p.pub, cfg, fl.dryRun, err); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return cli.Exit(1, errors.New("interrupted: the state file keeps the progress, run the command again to resume"))
		}
		return cli.Exit(1, err)
	}
	return nil
}

// trustedEdges reads front.trusted_edges from the origin's configuration
// file (origin.config); nil when none is named.
func trustedEdges(path string) ([]netip.Prefix, error) {
	if path == "" {
		return nil, nil
	}
	b, err := safefile.Read(path, safefile.MaxConfig, nil)
	if err != nil {
		return nil, fmt.Errorf("origin.config: %w", err)
	}
	var oc struct {
		Front struct {
			TrustedEdges []string `yaml:"trusted_edges"`
		} `yaml:"front"`
	}
	if err := yaml.Unmarshal(b, &oc); err != nil {
		return nil, fmt.Errorf("origin.config %s: %w", path, err)
	}
	out := []netip.Prefix{}
	for _, s := range oc.Front.TrustedEdges {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("origin.config %s: front.trusted_edges: %q is not a CIDR or an IP address", path, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func applyCommand() *cobra.Command {
	var fl convergeFlags
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "converge DNS and the firewall to fleet.yaml, in the one safe order",
		Long: `apply makes the live fleet what fleet.yaml lists: 1 the firewall allows every
new edge; 2 each new edge is probed end to end (TLS and one LDAP round trip
through it to the origin), and one that fails stops the run; 3 DNS adds the
new edges; 4 DNS removes the edges no longer listed (one UPDATE each, never
leaving the set empty, each read back); 5 a removed edge stays allowed until
one TTL plus slack has passed and its connections drained (or drain_timeout);
6 the firewall drops it. Progress is kept in fleet.state.json beside
fleet.yaml: an interrupted run resumes, a run with nothing to do changes
nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(fl.output); err != nil {
				return err
			}
			if err := fl.check(); err != nil {
				return err
			}
			p, err := setupFleet(cmd, fl)
			if err != nil {
				return err
			}
			if err := needEdges(p.f); err != nil {
				return err
			}
			if err := checkEdges(p.f.Config, fl); err != nil {
				return err
			}
			if needsConfirm(fl.yes, fl.dryRun) {
				if err := preview(cmd, p, fl, func(pv convergeFlags) error { return converge(cmd, p, p.f.Config, pv, false, nil) }); err != nil {
					return err
				}
			}
			return converge(cmd, p, p.f.Config, fl, false, nil)
		},
	}
	fl.register(cmd.Flags(), true)
	cmd.Flags().StringVarP(&fl.output, "output", "o", "text", "text (progress lines) or json (one object at the end; the lines go to stderr)")
	yesFlag(cmd, &fl.yes)
	return cmd
}

func rotateCommand() *cobra.Command {
	var fl convergeFlags
	var out, in string
	cmd := &cobra.Command{
		Use:   "rotate --out OLD --in NEW=IPV4[,IPV6]",
		Short: "replace edge OLD by NEW in fleet.yaml (in place, comments kept) and converge",
		Long: `rotate replaces edge OLD by NEW in fleet.yaml at the same place (comments kept)
and converges as apply does: NEW is allowed, probed and published before OLD
leaves DNS, and OLD leaves the firewall only after one TTL plus slack and its
drain. fleet.yaml is written (atomically, through a symlink) only once NEW
passed its probe and the DNS server accepted the key, so a rotation that
fails before leaves it as it was. Run again after an interruption, it finds
fleet.yaml already edited and resumes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			newEdge, err := deploy.ParseIn(in)
			if err != nil {
				return err
			}
			if out == "" {
				return errors.New("--out: the edge to rotate out is required")
			}
			if err := fl.check(); err != nil {
				return err
			}
			p, err := setupFleet(cmd, fl)
			if err != nil {
				return err
			}
			if needsConfirm(fl.yes, fl.dryRun) {
				// The preview is a dry run: rotateInventory writes
				// nothing and gives no write for the converger to call.
				err := preview(cmd, p, fl, func(pv convergeFlags) error {
					cfg, _, err := rotateInventory(cmd, p, out, newEdge, true)
					if err != nil {
						return err
					}
					if err := checkEdges(cfg, pv); err != nil {
						return err
					}
					return converge(cmd, p, cfg, pv, false, nil)
				})
				if err != nil {
					return err
				}
			}
			// One lock from the edit of fleet.yaml to the end of the
			// convergence: no other apply or rotate sees half of it.
			if !fl.dryRun {
				unlock, err := deploy.LockState(statePath(p.f.path))
				if err != nil {
					return cli.Exit(1, err)
				}
				defer unlock()
			}
			cfg, write, err := rotateInventory(cmd, p, out, newEdge, fl.dryRun)
			if err != nil {
				return err
			}
			if err := checkEdges(cfg, fl); err != nil {
				return err
			}
			return converge(cmd, p, cfg, fl, true, write)
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the edge leaving the fleet")
	cmd.Flags().StringVar(&in, "in", "", "the edge joining it: NAME=IPV4[,IPV6]")
	fl.register(cmd.Flags(), true)
	yesFlag(cmd, &fl.yes)
	return cmd
}

// rotateInventory returns the inventory with out replaced by in, and
// write, which records out in the state file (so that it can be drained
// by name) and then writes fleet.yaml: the convergence calls it once the
// DNS server has accepted the key and in has passed its probe, so a
// rotation that fails before leaves fleet.yaml as it was. Already done (a
// resumed rotation) or dryRun, write is nil.
func rotateInventory(cmd *cobra.Command, p fleetParts, out string, in deploy.Edge, dryRun bool) (deploy.Config, func() error, error) {
	cfg := p.f.Config
	old, hasOld := cfg.Edge(out)
	cur, hasIn := cfg.Edge(in.Name)
	readdress := out == in.Name // the same edge on new addresses
	switch {
	case hasIn && cur.IPv4 == in.IPv4 && cur.IPv6 == in.IPv6 && (!hasOld || readdress):
		st, err := deploy.LoadState(statePath(p.f.path))
		switch {
		case err != nil:
			return cfg, nil, cli.Exit(1, err)
		case deploy.RotationLeft(st, out, in):
			fmt.Fprintf(cmd.OutOrStdout(), "fleet.yaml already lists %s instead of %s: resuming\n", in, out)
		case readdress:
			fmt.Fprintf(cmd.OutOrStdout(), "fleet.yaml already lists %s: nothing to rotate\n", in)
		default:
			fmt.Fprintf(cmd.OutOrStdout(), "fleet.yaml already lists %s instead of %s, and the rotation is done: nothing to rotate\n", in, out)
		}
		return cfg, nil, nil
	case !hasOld:
		return cfg, nil, fmt.Errorf("--out %s: no such edge in fleet.yaml", out)
	case hasIn && !readdress:
		return cfg, nil, fmt.Errorf("--in %s: already in fleet.yaml", in.Name)
	}
	if p.f.path == "" {
		return cfg, nil, errors.New("rotate edits fleet.yaml: give --config or run beside fleet.yaml")
	}
	if err := deploy.CheckIn(cfg, out, in); err != nil {
		return cfg, nil, err
	}
	next := cfg
	next.Edges = nil
	for _, e := range cfg.Edges {
		if e.Name == out {
			e = in
		}
		next.Edges = append(next.Edges, e)
	}
	if err := next.Validate(); err != nil {
		return cfg, nil, fmt.Errorf("--in: %w", err)
	}
	if dryRun {
		fmt.Fprintf(cmd.OutOrStdout(), "would edit %s: %s out, %s in (once %s passed its probe)\n", p.f.path, out, in, in.Name)
		return next, nil, nil
	}
	src, err := safefile.Read(p.f.path, safefile.MaxConfig, nil)
	if err != nil {
		return cfg, nil, fmt.Errorf("config: %w", err)
	}
	edited, err := deploy.RotateInventory(src, out, in)
	if err != nil {
		return cfg, nil, err
	}
	// The state remembers out before the file forgets it.
	sp := statePath(p.f.path)
	st, err := deploy.LoadState(sp)
	if err != nil {
		return cfg, nil, err
	}
	if err := st.Adopt(cfg, sp); err != nil {
		return cfg, nil, err
	}
	if st.Edges[out] == nil {
		st.Edges[out] = &deploy.EdgeState{IPv4: old.IPv4, IPv6: old.IPv6, Metrics: old.Metrics, State: deploy.StateActive}
		if err := st.Save(sp); err != nil {
			return cfg, nil, err
		}
	}
	write := func() error {
		deploy.RemoveTemps(p.f.path) // of a rotation killed while writing it; we hold the lock
		if err := deploy.WriteFileAtomic(p.f.path, edited, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "edited %s: %s out, %s in\n", p.f.path, out, in)
		return nil
	}
	return next, write, nil
}

func statusCommand() *cobra.Command {
	var fl convergeFlags
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "the fleet at a glance: one row per edge",
		Long: `status prints, for every edge of fleet.yaml and every edge still draining:
its address, whether DNS answers it and the firewall lets it in, the TLS
handshake time of a fresh probe through it to the origin, the connections
per second the origin refused from it (from origin.metrics, read twice a
second apart while the probes run), its active connections (from metrics)
and its state (active, draining, new, failed, withdrawn by fleet watch).
An address live in DNS or the firewall that no edge has is a row of its
own (state unknown) until a run adopts it as draining. Every address of an
edge is probed. Exit 0: every row is well; 1: a row is failed or unknown,
a peer could not be read, or the state file is another inventory's; 2: a
bad fleet.yaml or flag.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			p, err := setupFleet(cmd, fl)
			if err != nil {
				return err
			}
			live, err := p.pub.Read(cmd.Context())
			if err != nil {
				return cli.Exit(1, err)
			}
			sp := statePath(p.f.path)
			st, err := deploy.LoadState(sp)
			if err != nil {
				return cli.Exit(1, err)
			}
			// Another inventory's state says nothing of this fleet: the
			// rows are built without it (its addresses unknown) and the
			// exit status says why, as apply would refuse it.
			foreign := st.Adopt(p.f.Config, sp)
			if foreign != nil {
				st = deploy.NewState()
			}
			rows, refusedErr := deploy.Status(cmd.Context(), p.f.Config, st, live, p.fw, p.probe,
				p.f.Config.Deploy.Scrape(), p.f.Config.Refused())
			if refusedErr != nil {
				// A warning: the exit status says what the rows say.
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v (REFUSED shows ?)\n", refusedErr)
			}
			var hosts []deploy.HostStatus
			if pool, ok := p.fw.(deploy.Pool); ok {
				hosts = pool.Hosts(deploy.FirewallSet(p.f.Config, st))
			}
			return printStatus(cmd, output, rows, p.fw, foreign, hosts...)
		},
	}
	fl.register(cmd.Flags(), false)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text (a table) or json")
	return cmd
}
