// Command probe is the agent's edge selection and the platform's edge
// monitor (docs/probe.md):
//
//	probe rank --name ldap.example.com --port 636 --ca ca.pem --cert agent.pem --key agent.key --state edges.json
//	probe watch --name ldap.example.com … # ranks, then prints better-edge and edge-left events as they happen
//	probe monitor --name ldap.example.com --ca ca.pem --once   # one round as a table
//	probe monitor --name ldap.example.com --metrics 127.0.0.1:9104   # /metrics and /status
//
// Names resolve through the system resolver, as the agent's real traffic
// does; --dns HOST:PORT asks one server directly, for tests and the demo.
package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/probe"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
)

// probeFile is the configuration file: the selection numbers at the top
// level, the TLS files, the output format, the monitor's endpoint and the
// log section.
type probeFile struct {
	probe.Config `mapstructure:",squash"`
	DNS          string `mapstructure:"dns"` // tests and the demo only
	CA           string `mapstructure:"ca"`
	Cert         string `mapstructure:"cert"`
	Key          string `mapstructure:"key"`
	ServerName   string `mapstructure:"server_name"` // default: name
	Format       string `mapstructure:"format"`      // table or json
	Metrics      string `mapstructure:"metrics"`     // monitor: /metrics and /status; "" disables
	// MonitorInterval is the monitor's period. Not the watcher's 5 min:
	// the monitor is one process, not a fleet to keep apart, and 30 s
	// matches the scrape interval, so the 3 min EdgefleetEdgeDown alert
	// means several failed rounds, not one.
	MonitorInterval time.Duration `mapstructure:"monitor_interval"`
	Log             cli.Log       `mapstructure:"log"`
}

func defaults() probeFile {
	return probeFile{Config: probe.DefaultConfig(), Format: "table", Metrics: "127.0.0.1:9104",
		MonitorInterval: 30 * time.Second, Log: cli.DefaultLog()}
}

// setup reads and checks the configuration, then builds the TLS config,
// the resolver and the logger: everything is checked before any probe.
func setup(cmd *cobra.Command) (probeFile, *tls.Config, *net.Resolver, *slog.Logger, error) {
	cfg := defaults()
	path, _ := cmd.Flags().GetString("config")
	if err := cli.Load(cmd.Flags(), path, &cfg); err != nil {
		return cfg, nil, nil, nil, err
	}
	if err := cfg.Log.Validate(); err != nil {
		return cfg, nil, nil, nil, err
	}
	if err := cfg.Config.Validate(); err != nil {
		return cfg, nil, nil, nil, err
	}
	if cfg.MonitorInterval <= 0 {
		return cfg, nil, nil, nil, fmt.Errorf("monitor_interval: %v must be positive", cfg.MonitorInterval)
	}
	if cfg.Format != "table" && cfg.Format != "json" {
		return cfg, nil, nil, nil, fmt.Errorf("format: %q is not table or json", cfg.Format)
	}
	var resolver *net.Resolver
	if cfg.DNS != "" {
		if _, _, err := net.SplitHostPort(cfg.DNS); err != nil {
			return cfg, nil, nil, nil, fmt.Errorf("dns: %q is not host:port", cfg.DNS)
		}
		resolver = probe.DNSResolver(cfg.DNS)
	}
	if cfg.Metrics != "" {
		if _, _, err := net.SplitHostPort(cfg.Metrics); err != nil {
			return cfg, nil, nil, nil, fmt.Errorf("metrics: %q is not host:port", cfg.Metrics)
		}
	}
	serverName := cfg.ServerName
	if serverName == "" {
		serverName = cfg.Name
	}
	conf, err := probe.ClientTLS(cfg.CA, cfg.Cert, cfg.Key, serverName)
	if err != nil {
		return cfg, nil, nil, nil, err
	}
	return cfg, conf, resolver, cli.Logger(cfg.Log, os.Stderr), nil
}

func main() {
	root := cli.Root("probe", "agent-side edge ranking, watcher and platform monitor")
	root.RunE = func(cmd *cobra.Command, args []string) error {
		cmd.Usage()
		return errors.New("a command is required: rank, watch or monitor")
	}
	pf := root.PersistentFlags()
	pf.String("name", "", "the name whose A/AAAA set is the edges (name)")
	pf.Int("port", 0, "the edges' port (port, default 636)")
	pf.String("dns", "", "ask this DNS server HOST:PORT instead of the system resolver: tests and demos only")
	pf.String("ca", "", "CA file verifying the origin (default: system roots)")
	pf.String("cert", "", "client certificate file")
	pf.String("key", "", "client key file")
	pf.String("server-name", "", "name the certificate is verified against (default: --name)")
	pf.String("state", "", "state file: the ranking, its address set and the choice")
	pf.Duration("budget", 0, "bound of one probe of one address (budget, default 2s)")
	pf.Duration("connect-timeout", 0, "bound of the dial of the name itself, without a choice (connect_timeout, default 10s)")
	pf.String("source", "", "local IP the probes and connections leave from (source; default: the kernel picks)")
	pf.String("format", "", "table or json")
	root.AddCommand(rankCommand(), watchCommand(), monitorCommand())
	if err := root.Execute(); err != nil {
		cli.Die("probe", err)
	}
}

func rankCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rank",
		Short: "probe every address of the name and print the ranking (written to --state)",
		Long: `rank resolves the name, probes every address in parallel (TCP connect, TLS
handshake verified against the name, one LDAP WhoAmI), each within its budget,
and prints the ranking: fastest first, failures last with their error. With
--state it is written to the state file, atomically. "chosen" is empty when
there is no choice (why is printed on stderr): the agent then dials the name.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, conf, resolver, log, err := setup(cmd)
			if err != nil {
				return err
			}
			d, err := probe.NewDialer(cfg.Config, conf)
			if err != nil {
				return err
			}
			d.Resolver, d.Log = resolver, log
			return printRanking(cmd, cfg.Format, d.Rank(cmd.Context()))
		},
	}
}

// printRanking prints r on stdout; with json, why there is no choice goes
// to stderr (the table says it itself), so the JSON keeps the state
// file's keys.
func printRanking(cmd *cobra.Command, format string, r probe.Ranking) error {
	w := cmd.OutOrStdout()
	if format == "json" {
		if r.NoChoice != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "probe: no choice (dial %s): %s\n", r.Name, r.NoChoice)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return r.WriteTable(w)
}

func watchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "select an edge as an agent would, then print the watcher's events (better-edge, edge-left) as they happen",
		Long: `watch selects the edge an agent would use (the state file when it holds a
fresh ranking of the same address set, else a new ranking), prints that
ranking, and then runs the watcher until interrupted: every interval with
full jitter it retries the addresses ranked above the current one, and it
measures the whole set again when the ranking is older than stale or the
address set changed. Each move is printed as one event (a JSON line with
--format json): better-edge for a faster edge, edge-left when the agent's
edge left the set.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, conf, resolver, log, err := setup(cmd)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			d, err := probe.NewDialer(cfg.Config, conf)
			if err != nil {
				return err
			}
			d.Resolver, d.Log = resolver, log
			w, err := probe.NewWatcher(d)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if err := printRanking(cmd, cfg.Format, d.Select(ctx)); err != nil {
				return err
			}
			events := make(chan probe.Event)
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx, events) }()
			for {
				select {
				case ev := <-events:
					printEvent(out, cfg.Format, ev)
				case <-done:
					return nil
				}
			}
		},
	}
	cmd.Flags().Duration("interval", 0, "upper bound of the wait between rounds (interval, default 5m)")
	cmd.Flags().Duration("stale", 0, "age after which the whole set is measured again (stale, default 1h)")
	return cmd
}

// printEvent prints ev: one JSON line, or "time reason: from (its time)
// -> to (its time)", where an edge that left the set has no time (it was
// not probed) and "" is the name (no choice).
func printEvent(w io.Writer, format string, ev probe.Event) {
	if format == "json" {
		json.NewEncoder(w).Encode(ev)
		return
	}
	side := func(addr string, msec float64, why string) string {
		switch {
		case addr == "":
			return "(the name)"
		case why != "":
			return addr + " (" + why + ")"
		}
		return fmt.Sprintf("%s (%.3f ms)", addr, msec)
	}
	fromWhy := ""
	if ev.Reason == probe.ReasonEdgeLeft {
		fromWhy = "left the set"
	}
	fmt.Fprintf(w, "%s %s: %s -> %s\n", ev.At.UTC().Format(time.RFC3339), ev.Reason, side(ev.From, ev.FromMS, fromWhy), side(ev.To, ev.ToMS, ""))
}

func monitorCommand() *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "monitor",
		Short: "the platform's view: TCP connect and TLS handshake through every edge, as metrics and GET /status",
		Long: `monitor resolves the name every interval (the system resolver, or --dns) and, for
every address, takes the TCP connect time and the full TLS handshake time on
one socket. Health is the handshake: an edge whose origin is gone still
answers TCP. It serves /metrics and GET /status on --metrics. With --once it
runs one round, prints it (a table, or JSON with --format json) and exits 1
when an edge is down or the name does not resolve.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, conf, resolver, log, err := setup(cmd)
			if err != nil {
				return err
			}
			mc := cfg.Config
			mc.Interval = cfg.MonitorInterval
			if cmd.Flags().Changed("interval") {
				mc.Interval = cfg.Interval
			}
			reg := prometheus.NewRegistry()
			m, err := probe.NewMonitor(mc, conf, reg)
			if err != nil {
				return err
			}
			m.Resolver, m.Log = resolver, log
			if once {
				return monitorOnce(cmd, cfg.Format, m)
			}
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			var ln net.Listener
			if cfg.Metrics != "" {
				if ln, err = net.Listen("tcp", cfg.Metrics); err != nil {
					return fmt.Errorf("metrics: %w", err)
				}
				mux := cli.Metrics(reg)
				mux.Handle("GET /status", m)
				srv := cli.HTTPServer(mux, log, "metrics")
				go srv.Serve(ln)
				defer srv.Close()
				log.Info("monitor listening", "addr", ln.Addr().String(), "target", cfg.Name)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			m.Run(ctx)
			return nil
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "one round, printed, then exit (1 when an edge is down)")
	cmd.Flags().Duration("interval", 0, "time between rounds (monitor_interval, default 30s)")
	cmd.Flags().String("metrics", "", "address of /metrics and GET /status (metrics, default 127.0.0.1:9104)")
	return cmd
}

func monitorOnce(cmd *cobra.Command, format string, m *probe.Monitor) error {
	st := m.Round(cmd.Context())
	out := cmd.OutOrStdout()
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		enc.Encode(st)
	} else {
		st.WriteTable(out)
	}
	if st.Error != "" {
		return cli.Exit(1, errors.New(st.Error))
	}
	for _, e := range st.Edges {
		if !e.Up {
			return cli.Exit(1, fmt.Errorf("edge %s is down: %s", e.Addr, e.Error))
		}
	}
	return nil
}
