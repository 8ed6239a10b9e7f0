package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/spf13/cobra"
)

func init() { subcommands = append(subcommands, dnsCommand) }

func dnsCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "dns",
		Short: "publish the edges as the A/AAAA set of name (RFC 2136 + TSIG)",
		Long: `dns reads and updates the A and AAAA records of the inventory's name on its
authoritative server (dns.server), with RFC 2136 UPDATEs signed by the TSIG
key dns.tsig. Only those two RRsets are touched; each change is one UPDATE,
additions before removals so the set is never empty, each read back.
"dns serve" is an embedded authoritative server for the demo and development.`,
	}
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 5*time.Second, "bound on each exchange with the server")
	cmd.AddCommand(dnsPlanCommand(&timeout), dnsApplyCommand(&timeout), dnsListCommand(&timeout), dnsServeCommand())
	return cmd
}

// dnsPlanCommand is "fleet dns plan"; *timeout is the dns command's flag.
func dnsPlanCommand(timeout *time.Duration) *cobra.Command {
	var planOutput string
	plan := &cobra.Command{
		Use:   "plan",
		Short: "print the UPDATEs apply would send (nsupdate syntax, or --output json)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(planOutput); err != nil {
				return err
			}
			_, p, err := dnsPlanned(cmd, *timeout)
			if err != nil {
				return err
			}
			if planOutput == "json" {
				return printJSON(cmd.OutOrStdout(), p.JSON())
			}
			fmt.Fprint(cmd.OutOrStdout(), p.String())
			return nil
		},
	}
	plan.Flags().StringVarP(&planOutput, "output", "o", "text", "text (nsupdate syntax) or json")
	return plan
}

// dnsApplyCommand is "fleet dns apply".
func dnsApplyCommand(timeout *time.Duration) *cobra.Command {
	var allowLoopback bool
	apply := &cobra.Command{
		Use:   "apply",
		Short: "publish exactly the inventory's edges: one UPDATE per change, each read back",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, pub, err := dnsSetup(cmd, *timeout)
			if err != nil {
				return err
			}
			if err := needEdges(f); err != nil {
				return err
			}
			if err := f.CheckEdgeAddrs(allowLoopback, nil); err != nil {
				return cli.Exit(cli.ExitConfig, err)
			}
			return applyDNS(cmd.Context(), cmd.OutOrStdout(), f, pub)
		},
	}
	apply.Flags().BoolVar(&allowLoopback, "allow-loopback", false, "accept loopback edge addresses (a fleet on one machine: the demo)")
	return apply
}

// dnsListCommand is "fleet dns list".
func dnsListCommand(timeout *time.Duration) *cobra.Command {
	var format string
	list := &cobra.Command{
		Use:   "list",
		Short: "print the A/AAAA set of name as the authoritative server answers it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("--format %q: want text or json", format)
			}
			_, pub, err := dnsSetup(cmd, *timeout)
			if err != nil {
				return err
			}
			set, err := pub.Read(cmd.Context())
			if err != nil {
				return cli.Exit(1, err)
			}
			return printRRSet(cmd.OutOrStdout(), set, format)
		},
	}
	list.Flags().StringVar(&format, "format", "text", "text or json")
	return list
}

// dnsSetup loads and checks the inventory for publishing.
func dnsSetup(cmd *cobra.Command, timeout time.Duration) (fleetFile, *deploy.Publisher, error) {
	f, _, err := loadFleet(cmd)
	if err != nil {
		return f, nil, err
	}
	if err := f.ValidateDNS(); err != nil {
		return f, nil, err
	}
	pub, err := deploy.NewPublisher(f.Config)
	if err != nil {
		return f, nil, err
	}
	pub.Timeout = timeout
	return f, pub, nil
}

// dnsPlanned is dnsSetup, then dnsPlan (a failure to read the live set
// exits 1).
func dnsPlanned(cmd *cobra.Command, timeout time.Duration) (*deploy.Publisher, deploy.DNSPlan, error) {
	f, pub, err := dnsSetup(cmd, timeout)
	if err != nil {
		return nil, deploy.DNSPlan{}, err
	}
	if err := needEdges(f); err != nil {
		return nil, deploy.DNSPlan{}, err
	}
	p, err := dnsPlan(cmd.Context(), f, pub)
	if err != nil {
		return nil, p, cli.Exit(1, err)
	}
	return pub, p, nil
}

// dnsPlan reads the live set and plans the inventory's; the state file
// (when there is one) names addresses that left the inventory.
func dnsPlan(ctx context.Context, f fleetFile, pub *deploy.Publisher) (deploy.DNSPlan, error) {
	live, err := pub.Read(ctx)
	if err != nil {
		return deploy.DNSPlan{}, err
	}
	gone := map[netip.Addr]string{}
	edges := f.Edges
	if st, err := deploy.LoadState(statePath(f.path)); err == nil {
		gone = st.Names()
		edges = deploy.Serving(f.Config, st).Edges // fleet watch's withdrawals stay out
	}
	return deploy.PlanDNS(f.Name, live, edges, uint32(f.TTL), gone)
}

// applyDNS publishes exactly the inventory's edges, a line per UPDATE
// once read back, under the inventory's lock. What it removes is recorded
// in the state file as draining since now (and a TTL it replaces, with
// when): the firewall keeps letting those addresses in until a `fleet
// apply` has waited for resolver caches and their drain.
func applyDNS(ctx context.Context, w io.Writer, f fleetFile, pub *deploy.Publisher) error {
	sp := statePath(f.path)
	unlock, err := deploy.LockState(sp)
	if err != nil {
		return cli.Exit(1, err)
	}
	defer unlock()
	deploy.RemoveTemps(sp) // of a run killed while saving; we hold the lock
	st, err := deploy.LoadState(sp)
	if err != nil {
		return cli.Exit(1, err)
	}
	if err := st.Adopt(f.Config, sp); err != nil {
		return cli.Exit(1, err)
	}
	live, err := pub.Read(ctx)
	if err != nil {
		return cli.Exit(1, err)
	}
	serving := deploy.Serving(f.Config, st) // fleet watch's withdrawals stay out
	deploy.Reconcile(f.Config, st, live, nil)
	p, err := deploy.PlanDNS(f.Name, live, serving.Edges, uint32(f.TTL), st.Names())
	if err != nil {
		return cli.Exit(1, err)
	}
	if len(p.Changes) == 0 {
		fmt.Fprintf(w, "%s in sync: %s\n", p.Name, addrs(p.After))
		return nil
	}
	if err := st.Save(sp); err != nil {
		return cli.Exit(1, err)
	}
	for _, c := range p.Changes {
		if err := deploy.ApplyChange(ctx, pub, f.Config, st, &live, p, c, time.Now()); err != nil {
			return cli.Exit(1, err)
		}
		fmt.Fprintf(w, "%s: %s, read back\n", p.Name, c.Describe())
		if err := st.Save(sp); err != nil {
			return cli.Exit(1, err)
		}
	}
	fmt.Fprintf(w, "%s now answers: %s\n", p.Name, addrs(p.After))
	return nil
}

func addrs(a []netip.Addr) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = x.String()
	}
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, " ")
}

// rrsetJSON is `fleet dns list --format json`.
type rrsetJSON struct {
	Name string   `json:"name"`
	TTL  uint32   `json:"ttl"`
	A    []string `json:"a"`
	AAAA []string `json:"aaaa"`
}

// rrsetJSONOf is the set as `dns list --format json` prints it.
func rrsetJSONOf(set deploy.RRSet) rrsetJSON {
	j := rrsetJSON{Name: strings.TrimSuffix(set.Name, "."), TTL: set.TTL(), A: []string{}, AAAA: []string{}}
	for _, a := range set.A {
		j.A = append(j.A, a.String())
	}
	for _, a := range set.AAAA {
		j.AAAA = append(j.AAAA, a.String())
	}
	return j
}

func printRRSet(w io.Writer, set deploy.RRSet, format string) error {
	j := rrsetJSONOf(set)
	if format == "json" {
		b, _ := json.Marshal(j)
		_, err := fmt.Fprintf(w, "%s\n", b)
		return err
	}
	if len(j.A)+len(j.AAAA) == 0 {
		_, err := fmt.Fprintf(w, "%s: no A or AAAA record\n", j.Name)
		return err
	}
	for _, a := range j.A {
		fmt.Fprintf(w, "%s\t%d\tIN\tA\t%s\n", j.Name, set.TTLA, a)
	}
	for _, a := range j.AAAA {
		fmt.Fprintf(w, "%s\t%d\tIN\tAAAA\t%s\n", j.Name, set.TTLAAAA, a)
	}
	return nil
}
