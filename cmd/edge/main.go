// Command edge runs the edge relay: it accepts clients on `listen`, writes a
// PROXY header to the first selectable origin and splices the bytes both
// ways. See docs/edge.md for its configuration.
//
//	edge --config edge.yaml
//	edge --origins origin.example:8636 --listen :636
//	edge --config edge.yaml --check   # exit 2 and one line when the file is bad
//
// SIGTERM or SIGINT stops accepting and drains open connections for up to
// drain_timeout (a second signal closes them at once); SIGHUP re-reads the
// configuration file and applies its `origins`.
package main

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/internal/listenaddr"
	"github.com/edgefleet/edgefleet/internal/safefile"
	"github.com/edgefleet/edgefleet/relay"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// edgeFile is the whole configuration file of the edge: the relay's keys
// at the top level, plus the metrics endpoint and the log section.
type edgeFile struct {
	relay.Config `mapstructure:",squash"`
	Metrics      string `mapstructure:"metrics"` // GET /metrics; "" disables
	// MetricsTokenFile holds the bearer token GET /metrics requires
	// (Authorization: Bearer …); empty: none is required.
	MetricsTokenFile string  `mapstructure:"metrics_token_file"`
	Log              cli.Log `mapstructure:"log"`

	token string // MetricsTokenFile's content, read by load
}

func defaults() edgeFile {
	cfg := edgeFile{Config: relay.DefaultConfig(), Metrics: "127.0.0.1:9101", Log: cli.DefaultLog()}
	if n := cli.NoFile(); n > 0 {
		cfg.MaxConns = relay.MaxConnsFor(n) // what this host's descriptors allow, at most 100000
	}
	return cfg
}

// load reads the configuration (file, environment, flags) and checks it.
func load(fs *pflag.FlagSet, path string) (edgeFile, error) {
	cfg := defaults()
	if err := cli.Load(fs, path, &cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Log.Validate(); err != nil {
		return cfg, err
	}
	if cfg.Metrics != "" {
		if _, _, err := net.SplitHostPort(cfg.Metrics); err != nil {
			return cfg, fmt.Errorf("metrics: %q is not host:port", cfg.Metrics)
		}
	}
	if cfg.MetricsTokenFile != "" {
		var err error
		if cfg.token, err = safefile.Token(cfg.MetricsTokenFile); err != nil {
			return cfg, fmt.Errorf("metrics_token_file: %w", err)
		}
	}
	if err := cfg.Config.Validate(); err != nil {
		return cfg, err
	}
	if err := listenaddr.Overlap(cfg.Listen); err != nil {
		return cfg, fmt.Errorf("listen: %w", err)
	}
	return cfg, cfg.CheckSelf() // this is the host the edge runs on (or --check runs on)
}

func main() {
	root := cli.Root("edge", "the edge relay: PROXY header + zero-copy splice to the origins")
	f := root.Flags()
	f.String("name", "", "edge name sent in the PROXY v2 TLV 0xE0 (overrides name)")
	f.StringSlice("listen", nil, "listen addresses (overrides listen)")
	f.StringSlice("origins", nil, "origin addresses host:port, tried in order (overrides origins)")
	f.String("proxy-protocol", "", "v2, v1 or off (overrides proxy_protocol)")
	f.String("metrics", "", "address of the metrics endpoint (overrides metrics)")
	f.String("metrics-token-file", "", "file holding the bearer token GET /metrics requires (overrides metrics_token_file)")
	f.String("source", "", "local IP the origin connections are made from (overrides source)")
	check := f.Bool("check", false, "check the configuration, print it is ok and exit without listening (fleet deploy push runs it)")
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			cli.Fatal("edge", fmt.Errorf("unexpected argument %q", args[0]))
		}
		path, _ := cmd.Flags().GetString("config")
		cfg, err := load(cmd.Flags(), path)
		if err != nil {
			cli.Fatal("edge", err)
		}
		if *check {
			fmt.Fprintf(cmd.OutOrStdout(), "edge: configuration ok (name %s, origins %s)\n", cfg.Name, strings.Join(relay.Names(cfg.Origins), " "))
			return nil
		}
		run(cfg, func() (edgeFile, error) { return load(cmd.Flags(), path) })
		return nil
	}
	if err := root.Execute(); err != nil {
		cli.Fatal("edge", err)
	}
}

// run serves until a signal stops it; reload re-reads the configuration
// for SIGHUP. Startup failures exit with one line.
func run(cfg edgeFile, reload func() (edgeFile, error)) {
	p := cli.Start("edge", cfg.Log)
	log := p.Log
	e, err := relay.New(cfg.Config, log, p.Reg)
	if err != nil {
		p.Fatal(err)
	}

	lns, err := cli.Listen(cfg.Listen)
	if err != nil {
		p.Fatal(fmt.Errorf("listen: %w", err))
	}
	p.ServeHTTP("metrics", cfg.Metrics, bearer(cfg.token, p.Metrics()))
	if n := cli.NoFile(); n > 0 && uint64(relay.Descriptors(cfg.MaxConns)) > n {
		log.Warn("max_conns needs more descriptors than RLIMIT_NOFILE: past it clients are refused as local-resources",
			"max_conns", cfg.MaxConns, "descriptors", relay.Descriptors(cfg.MaxConns), "rlimit_nofile", n)
	}
	if cfg.Metrics != "" && cfg.token == "" && !loopback(cfg.Metrics) {
		log.Warn("metrics reachable from other hosts without metrics_token_file: anyone who reaches it reads the edge's counters",
			"metrics", cfg.Metrics)
	}

	serveErr := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { serveErr <- e.Serve(ln) }()
		log.Info("edge listening", "addr", ln.Addr().String(), "name", cfg.Name, "origins", relay.Names(cfg.Origins),
			"proxy_protocol", cfg.ProxyProtocol, "source", cfg.Source, "metrics", cfg.Metrics, "max_conns", cfg.MaxConns)
	}

	failed := p.Wait(serveErr, func() { reloadOrigins(e, &cfg, reload, log) }, cfg.DrainTimeout)
	ctx, cancel := p.Drain(0)
	e.Shutdown(ctx) // bounded by drain_timeout
	cancel()
	p.Exit(failed)
}

// reloadOrigins applies the origins of a freshly read configuration. Other
// keys need a restart; a bad file keeps the running configuration.
func reloadOrigins(e *relay.Edge, cfg *edgeFile, reload func() (edgeFile, error), log *slog.Logger) {
	next, err := reload()
	if err != nil {
		log.Error("reload failed, keeping the running configuration", "err", err)
		return
	}
	if restart := slices.DeleteFunc(cli.Changed(*cfg, next), func(k string) bool { return k == "origins" }); len(restart) > 0 {
		log.Warn("reload: changed keys need a restart, still running with their old values", "keys", restart)
	}
	if slices.Equal(next.Origins, cfg.Origins) {
		log.Info("reload: origins unchanged", "origins", relay.Names(cfg.Origins))
		return
	}
	e.SetOrigins(next.Origins)
	log.Info("origins reloaded", "origins", relay.Names(next.Origins), "was", relay.Names(cfg.Origins))
	cfg.Origins = next.Origins
}

// bearer serves h to requests that carry token (Authorization: Bearer),
// compared in constant time; the others get 401. An empty token lets
// every request through.
func bearer(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="edgefleet-edge"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// loopback reports whether a listen address only takes connections from
// this host.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
