package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/signal"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
)

func init() { subcommands = append(subcommands, exporterCommand) }

// defaultExporterListen is beside the probe monitor's 9104.
const defaultExporterListen = "127.0.0.1:9105"

func exporterCommand() *cobra.Command {
	var listen string
	var timeout, cache time.Duration
	cmd := &cobra.Command{
		Use:   "exporter",
		Short: "serve /metrics: the DNS set of name against the inventory, for Prometheus",
		Long: `exporter serves /metrics for Prometheus (job edgefleet-fleet). On each scrape
it reads fleet.yaml again and asks the authoritative server (dns.server) for
the A and AAAA set of name, as "fleet dns list" does:

  edgefleet_fleet_inventory_edges{name,family}  edges of fleet.yaml with an address of the family
  edgefleet_fleet_dns_records{name,family}      addresses the server answers (absent when it does not)
  edgefleet_fleet_dns_up{name}                  1 when the server answered, 0 when the read failed
  edgefleet_fleet_dns_missing_records{name,family}  addresses of the edges the server does not answer
  edgefleet_fleet_dns_unknown_records{name,family}  addresses it answers that no edge has
  edgefleet_fleet_dns_unknown_address{name,family,address}  1 for each of those

family is ipv4 or ipv6; the sets are compared, not only counted, and the
last three are absent, like dns_records, when the read fails. One read answers every scrape for --cache, and
concurrent scrapes share it; --timeout bounds it. It only reads: no TSIG
key is needed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, log, err := loadExporterInventory(cmd)
			if err != nil {
				return err
			}
			if cache < 0 || timeout <= 0 {
				return fmt.Errorf("--cache %v, --timeout %v: want --cache ≥ 0 and --timeout > 0", cache, timeout)
			}
			x := &deploy.Exporter{
				Inventory: func() (deploy.Config, error) {
					f, _, err := loadExporterInventory(cmd)
					return f.Config, err
				},
				Read: func(ctx context.Context, cfg deploy.Config) (deploy.RRSet, error) {
					pub := deploy.ReadOnlyPublisher(cfg)
					pub.Timeout = timeout
					return pub.Read(ctx)
				},
				Timeout: timeout,
				MaxAge:  cache,
				Log:     log,
			}
			if cache == 0 {
				x.MaxAge = -1
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(x, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return cli.Exit(1, fmt.Errorf("listen %s: %w", listen, err))
			}
			srv := cli.HTTPServer(cli.Metrics(reg), log, "metrics")
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			log.Info("fleet exporter listening", "addr", ln.Addr().String(), "target", f.DNS.Server, "name", f.Name)

			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			select {
			case <-ctx.Done():
				log.Info("fleet exporter stopping", "addr", ln.Addr().String())
				return srv.Close()
			case err := <-served:
				return cli.Exit(1, fmt.Errorf("serve %s: %w", ln.Addr(), err))
			}
		},
	}
	cmd.Flags().StringVar(&listen, "listen", defaultExporterListen, "host:port of /metrics")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "bound on one read of the DNS server")
	cmd.Flags().DurationVar(&cache, "cache", 5*time.Second, "how long one read answers scrapes (0: every scrape reads)")
	return cmd
}

// loadExporterInventory loads fleet.yaml with what reading the name's set
// needs: name, zone and dns.server. dns.tsig is dropped unread: reads are
// unsigned, so the exporter can run as a user who cannot read the key.
func loadExporterInventory(cmd *cobra.Command) (fleetFile, *slog.Logger, error) {
	f, log, err := loadFleet(cmd)
	if err != nil {
		return f, nil, err
	}
	f.DNS.TSIG = deploy.TSIG{}
	errs := []error{f.Validate()}
	for _, kv := range [][2]string{{"name", f.Name}, {"zone", f.Zone}, {"dns.server", f.DNS.Server}} {
		if kv[1] == "" {
			errs = append(errs, fmt.Errorf("%s: required to read the edges' DNS set", kv[0]))
		}
	}
	return f, log, errors.Join(errs...)
}
