package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// zoneFile is the embedded server's zone file, beside the inventory.
const zoneFile = "fleet.zone"

func dnsServeCommand() *cobra.Command {
	var listen, file, ns, metrics string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run an embedded authoritative server for zone (demo, development)",
		Long: `serve answers for the inventory's zone (SOA, NS, the A/AAAA set of name)
on UDP and TCP, and applies RFC 2136 UPDATEs of name's A and AAAA records
signed with the key dns.tsig; any other change, and a replayed update, is
REFUSED. UDP answers fit 512 bytes or the query's EDNS size (TC beyond); ANY
gets one HINFO (RFC 8482). The zone is kept in a file (written atomically on
every update) so it survives a restart. Production points dns.server at
BIND, Knot, PowerDNS or any RFC 2136 server instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, log, err := loadFleet(cmd)
			if err != nil {
				return err
			}
			if listen == "" {
				listen = f.DNS.Server
			}
			if listen == "" {
				return errors.New("--listen: required when dns.server is empty")
			}
			if err := f.ValidateDNS(); err != nil {
				return err
			}
			secret, err := f.DNS.TSIG.LoadSecret()
			if err != nil {
				return err
			}
			if file == "" {
				file = zoneFile
				if f.path != "" {
					file = filepath.Join(filepath.Dir(f.path), zoneFile)
				}
			}
			// The name server's address record: the listen address, when
			// that is one host.
			nsAddr, _, _ := net.SplitHostPort(listen)
			if ip := net.ParseIP(nsAddr); ip == nil || ip.IsUnspecified() {
				nsAddr = ""
			}
			reg := prometheus.NewRegistry()
			srv, err := deploy.NewServer(deploy.ServerConfig{
				Zone: f.Zone, ZoneFile: file, NS: ns, NSAddr: nsAddr,
				KeyName: f.DNS.TSIG.Name, Algorithm: f.DNS.TSIG.Algorithm, Secret: secret,
				Names: []string{f.Name}, Log: log, Registerer: reg,
			})
			if err != nil {
				return err
			}
			pc, ln, err := deploy.Listen(listen)
			if err != nil {
				return cli.Exit(1, err)
			}
			if metrics != "" {
				mln, err := net.Listen("tcp", metrics)
				if err != nil {
					return cli.Exit(1, fmt.Errorf("metrics: %w", err))
				}
				ms := cli.HTTPServer(cli.Metrics(reg), log, "metrics")
				go ms.Serve(mln)
				defer ms.Close()
				log.Info("dns server metrics", "addr", mln.Addr().String())
			}
			srv.Serve(pc, ln)
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			log.Info("dns server stopping", "addr", srv.Addr)
			return srv.Close()
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "host:port to serve on, UDP and TCP (default: dns.server)")
	cmd.Flags().StringVar(&file, "zone-file", "", "where the zone is kept (default: fleet.zone beside fleet.yaml)")
	cmd.Flags().StringVar(&ns, "ns", "", "the zone's name server (default: ns1.<zone>)")
	cmd.Flags().StringVar(&metrics, "metrics", "", "host:port of /metrics (edgefleet_fleet_dns_updates_total; default: none)")
	return cmd
}
