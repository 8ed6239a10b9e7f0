// Command origin runs the origin: PROXY-sniffing front and LDAP routing core.
// See docs/origin.md and docs/ldap-core.md for its configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/origin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// drainTimeout is how long SIGTERM/SIGINT waits for open connections before
// closing them; a second signal closes them at once.
const drainTimeout = 30 * time.Second

// originFile is the whole configuration file of the origin.
type originFile struct {
	Front    origin.Config `mapstructure:"front"`
	PeersAPI string        `mapstructure:"peers_api"` // GET /peers, /peers/{port} (and the core's /backends); "" disables
	Metrics  string        `mapstructure:"metrics"`   // GET /metrics; "" disables
	Log      cli.Log       `mapstructure:"log"`
	Core     coreSection   `mapstructure:"core"`
}

func defaults() originFile {
	return originFile{
		Front:    origin.DefaultConfig(),
		PeersAPI: "127.0.0.1:9103",
		Metrics:  "127.0.0.1:9102",
		Log:      cli.DefaultLog(),
		Core:     defaultCore(),
	}
}

func main() {
	root := cli.Root("origin", "the origin: PROXY-sniffing front and LDAP routing core")
	root.Flags().String("peers-api", "", "address of the peers API (overrides peers_api)")
	root.Flags().String("metrics", "", "address of the metrics endpoint (overrides metrics)")
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			cli.Fatal("origin", fmt.Errorf("unexpected argument %q", args[0]))
		}
		path, _ := cmd.Flags().GetString("config")
		cfg := defaults()
		if err := cli.Load(cmd.Flags(), path, &cfg); err != nil {
			cli.Fatal("origin", err)
		}
		if err := cfg.Log.Validate(); err != nil {
			cli.Fatal("origin", err)
		}
		if err := cfg.Front.Validate(); err != nil {
			cli.Fatal("origin", err)
		}
		return run(cfg)
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "origin:", err)
		os.Exit(2)
	}
}

// run starts the front, the HTTP endpoints and the core, and returns when a
// signal has stopped them. Startup failures exit with one line.
func run(cfg originFile) error {
	logw := cli.NewLogWriter(os.Stderr)
	defer logw.Close()
	log := cli.Logger(cfg.Log, logw)
	fatal := func(err error) { logw.Close(); cli.Fatal("origin", err) }
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	table := origin.NewPeerTable()
	front, err := origin.New(cfg.Front, table, log, reg)
	if err != nil {
		fatal(err)
	}
	var lns []net.Listener
	for _, addr := range cfg.Front.Listen {
		ln, err := frontListen(addr)
		if err != nil {
			fatal(fmt.Errorf("front.listen: %w", err))
		}
		lns = append(lns, ln)
	}

	peers := http.NewServeMux()
	peers.Handle("/peers", table.Handler())
	peers.Handle("/peers/", table.Handler())
	metrics := http.NewServeMux()
	metrics.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	var servers []*http.Server
	for _, ep := range []struct {
		key, addr string
		h         http.Handler
	}{{"peers_api", cfg.PeersAPI, peers}, {"metrics", cfg.Metrics, metrics}} {
		if ep.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", ep.addr)
		if err != nil {
			fatal(fmt.Errorf("%s: %w", ep.key, err))
		}
		srv := &http.Server{Handler: ep.h, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server stopped", "endpoint", ep.key, "error", err)
			}
		}()
	}

	serveErr := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { serveErr <- front.Serve(ln) }()
		log.Info("front listening", "addr", ln.Addr().String(), "inner", cfg.Front.Inner,
			"trusted_edges", cfg.Front.TrustedEdges, "untrusted", cfg.Front.Untrusted,
			"require_header", cfg.Front.RequireHeader)
	}

	stopCore, err := startCore(cfg.Core, table, peers, log, reg)
	if err != nil {
		code := 2
		var ec interface{ ExitCode() int }
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		}
		logw.Close()
		cli.FatalCode("origin", err, code)
	}

	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	var failed error
	select {
	case s := <-sig:
		log.Info("shutting down", "signal", s.String(), "drain_timeout", drainTimeout.String())
	case err := <-serveErr:
		if err != nil {
			log.Error("front stopped", "error", err)
			failed = err
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	go func() {
		select {
		case <-sig:
			log.Info("second signal: closing open connections")
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := front.Shutdown(ctx); err != nil {
		log.Warn("drain cut short", "error", err)
	}
	if err := stopCore(ctx); err != nil {
		log.Warn("core stop", "error", err)
	}
	for _, srv := range servers {
		srv.Close()
	}
	if failed != nil {
		logw.Close()
		os.Exit(1)
	}
	return nil
}

// Go's default keepalive for accepted connections: idle and interval 15s,
// 9 probes.
const (
	keepaliveSecs  = 15
	keepaliveCount = 9
)

// frontListen listens for the front with Go's default keepalive set once
// on the listening socket, which accepted sockets inherit, instead of
// four setsockopt calls on each accepted connection.
func frontListen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{
		KeepAlive: -1,
		Control: func(network, address string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				for _, o := range [][3]int{
					{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
					{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, keepaliveSecs},
					{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, keepaliveSecs},
					{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepaliveCount},
				} {
					if serr = unix.SetsockoptInt(int(fd), o[0], o[1], o[2]); serr != nil {
						return
					}
				}
			})
			if err == nil {
				err = serr
			}
			return err
		},
	}
	return lc.Listen(context.Background(), "tcp", addr)
}
