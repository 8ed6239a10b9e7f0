// Command origin runs the origin: PROXY-sniffing front and LDAP routing core.
// See docs/origin.md and docs/ldap-core.md for its configuration.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/internal/listenaddr"
	"github.com/edgefleet/edgefleet/origin"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	cfg := originFile{
		Front:    origin.DefaultConfig(),
		PeersAPI: "127.0.0.1:9103",
		Metrics:  "127.0.0.1:9102",
		Log:      cli.DefaultLog(),
		Core:     defaultCore(),
	}
	if n := cli.NoFile(); n > 0 {
		// What this host's descriptors allow, the core in the process
		// (its default) counted: at most 100000.
		cfg.Front.MaxConns = origin.MaxConnsFor(n, cfg.Core.Enabled)
	}
	return cfg
}

// load reads the configuration (file, environment, flags) and checks what
// can be checked without reading other files; the core's section is checked
// by buildCore, still before anything listens.
func load(fs *pflag.FlagSet, path string) (originFile, error) {
	cfg := defaults()
	if err := cli.Load(fs, path, &cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Log.Validate(); err != nil {
		return cfg, err
	}
	if err := cfg.Front.Validate(); err != nil {
		return cfg, err
	}
	if err := listenaddr.Overlap(cfg.Front.Listen); err != nil {
		return cfg, fmt.Errorf("front.listen: %w", err)
	}
	return cfg, nil
}

// check builds what run builds before it binds a port — the front, the
// core (TLS files, the DLP file) and the HTTP addresses — and binds none.
func check(cfg originFile) error {
	discard := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	table := origin.NewPeerTable()
	if _, err := origin.New(cfg.Front, table, discard, reg); err != nil {
		return err
	}
	if _, err := buildCore(cfg.Core, table, discard, reg); err != nil {
		return err
	}
	return checkEndpoints(cfg)
}

// checkEndpoints checks the HTTP endpoints' addresses.
func checkEndpoints(cfg originFile) error {
	for _, ep := range [][2]string{{"peers_api", cfg.PeersAPI}, {"metrics", cfg.Metrics}} {
		if _, _, err := net.SplitHostPort(ep[1]); ep[1] != "" && err != nil {
			return fmt.Errorf("%s: %q is not host:port", ep[0], ep[1])
		}
	}
	return nil
}

func main() {
	root := cli.Root("origin", "the origin: PROXY-sniffing front and LDAP routing core")
	root.Flags().String("peers-api", "", "address of the peers API (overrides peers_api)")
	root.Flags().String("metrics", "", "address of the metrics endpoint (overrides metrics)")
	checkOnly := root.Flags().Bool("check", false, "check the configuration (front, core, HTTP addresses), print it is ok and exit without listening")
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			cli.Fatal("origin", fmt.Errorf("unexpected argument %q", args[0]))
		}
		path, _ := cmd.Flags().GetString("config")
		reload := func() (originFile, error) { return load(cmd.Flags(), path) }
		cfg, err := reload()
		if err != nil {
			cli.Fatal("origin", err)
		}
		if *checkOnly {
			if err := check(cfg); err != nil {
				cli.Die("origin", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "origin: configuration ok (front %v, inner %s)\n", cfg.Front.Listen, cfg.Front.Inner)
			return nil
		}
		return run(cfg, reload)
	}
	if err := root.Execute(); err != nil {
		cli.Die("origin", err)
	}
}

// run starts the front, the HTTP endpoints and the core, and returns when a
// signal has stopped them; reload re-reads the configuration for SIGHUP.
// Startup failures exit with one line.
func run(cfg originFile, reload func() (originFile, error)) error {
	p := cli.Start("origin", cfg.Log)
	log := p.Log

	// Everything is checked and built before a single port is bound.
	table := origin.NewPeerTable()
	front, err := origin.New(cfg.Front, table, log, p.Reg)
	if err != nil {
		p.Fatal(err)
	}
	srv, err := buildCore(cfg.Core, table, log, p.Reg)
	if err != nil {
		p.Fatal(err)
	}
	if err := checkEndpoints(cfg); err != nil {
		p.Fatal(err)
	}
	if cfg.Core.Enabled && listenaddr.SelfTarget([]string{cfg.Core.Listen}, cfg.Front.Inner) == "" {
		log.Warn("front.inner is not core.listen: connections go past the core", "inner", cfg.Front.Inner,
			"core_listen", cfg.Core.Listen)
	}

	lns, err := cli.Listen(cfg.Front.Listen)
	if err != nil {
		p.Fatal(fmt.Errorf("front.listen: %w", err))
	}
	var coreLn net.Listener
	if srv != nil {
		if coreLn, err = net.Listen("tcp", cfg.Core.Listen); err != nil {
			p.Fatal(fmt.Errorf("core.listen: %w", err))
		}
	}
	peers := http.NewServeMux()
	peers.Handle("/peers", table.Handler())
	peers.Handle("/peers/", table.Handler())
	// What fleet reads to tell the operator a new edge is not trusted yet.
	peers.HandleFunc("GET /trusted_edges", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string][]string{"trusted_edges": front.TrustedEdges()})
	})
	p.ServeHTTP("peers_api", cfg.PeersAPI, peers)
	p.ServeHTTP("metrics", cfg.Metrics, p.Metrics())

	warnNofile(log, cfg.Front.MaxConns, cfg.Core.Enabled) // once listening: a start that fails prints one line
	if t := cfg.Core.TLS; cfg.Core.Enabled && t.TicketKeyFile != "" && !t.usesTicketKeyFile() {
		log.Warn("core.tls.ticket_key_file is not read: TLS or session tickets are off", "file", t.TicketKeyFile,
			"tls", t.Mode, "ticket_keys", t.TicketKeys)
	}

	// A listener that really fails ends the binary: never a front that
	// forwards to a core nobody accepts for.
	serveErr := make(chan error, len(lns)+1)
	for _, ln := range lns {
		go func() {
			if err := front.Serve(ln); err != nil {
				serveErr <- fmt.Errorf("front: %w", err)
			}
		}()
		log.Info("front listening", "addr", ln.Addr().String(), "inner", cfg.Front.Inner,
			"trusted_edges", cfg.Front.TrustedEdges, "untrusted", cfg.Front.Untrusted,
			"require_header", cfg.Front.RequireHeader, "max_conns", cfg.Front.MaxConns)
	}
	stopCore := func(context.Context) error { return nil }
	if srv != nil {
		stopCore = serveCore(cfg.Core, srv, coreLn, peers, log, serveErr)
	}

	failed := p.Wait(serveErr, func() { cfg = reloaded(cfg, front, srv, reload, log) }, drainTimeout)
	ctx, cancel := p.Drain(drainTimeout)
	defer cancel()
	if err := front.Shutdown(ctx); err != nil {
		log.Warn("drain cut short", "err", err)
	}
	if err := stopCore(ctx); err != nil {
		log.Warn("core stop", "err", err)
	}
	p.Exit(failed)
	return nil
}

// reloaded answers SIGHUP: it re-reads the configuration and applies
// front.trusted_edges, front.per_edge, the core's pins (core.tls.pins, the file read
// again) and an origin pool's ticket keys (core.tls.ticket_key_file, read
// again) at once — open connections keep going, the next ones are judged
// by the new values — names the other keys that changed (they need a
// restart) and returns the configuration now in force. A file that fails a
// check keeps the whole running configuration.
func reloaded(cfg originFile, front *origin.Front, srv *core.Server, reload func() (originFile, error), log *slog.Logger) originFile {
	running := cfg // what a failed reload returns: nothing of it applied
	fail := func(err error) originFile {
		log.Error("reload failed, keeping the running configuration", "err", err)
		return running
	}
	next, err := reload()
	if err != nil {
		return fail(err)
	}
	changed := cli.Changed(cfg, next)
	applied := false
	// An origin pool's ticket keys: the file the core started with, read
	// again now and put in force last (a new path needs a restart, as any
	// changed key).
	var keys [][32]byte
	if srv != nil && cfg.Core.Enabled && cfg.Core.TLS.usesTicketKeyFile() {
		if keys, err = readTicketKeys(cfg.Core.TLS.TicketKeyFile); err != nil {
			return fail(err)
		}
	}
	undoPins := func() {}
	if srv != nil && next.Core.Enabled {
		ok, undo, err := reloadPins(srv, next.Core.TLS.Pins, log)
		if err != nil {
			return fail(err)
		}
		applied, undoPins = ok, undo
		cfg.Core.TLS.Pins = next.Core.TLS.Pins
		changed = slices.DeleteFunc(changed, func(k string) bool { return k == "core.tls.pins" })
	}
	if slices.Contains(changed, "front.trusted_edges") {
		if err := front.SetTrustedEdges(next.Front.TrustedEdges); err != nil {
			undoPins()
			return fail(err)
		}
		log.Info("trusted_edges reloaded", "trusted_edges", next.Front.TrustedEdges, "was", cfg.Front.TrustedEdges)
		cfg.Front.TrustedEdges = next.Front.TrustedEdges
		changed = slices.DeleteFunc(changed, func(k string) bool { return k == "front.trusted_edges" })
		applied = true
	}
	// per_edge after everything that can fail: reload checked it already,
	// as it checked the ticket keys applied below.
	perEdge := func(k string) bool { return strings.HasPrefix(k, "front.per_edge.") }
	if slices.ContainsFunc(changed, perEdge) {
		if err := front.SetPerEdge(next.Front.PerEdge); err != nil {
			log.Error("[unexpected] per_edge not reloaded", "err", err)
		} else {
			was, pe := cfg.Front.PerEdge, next.Front.PerEdge
			log.Info("per_edge reloaded", "conns", pe.Conns, "rate", pe.Rate, "burst", pe.Burst,
				"was", fmt.Sprintf("conns %d, rate %s, burst %d", was.Conns, was.Rate, was.Burst))
			cfg.Front.PerEdge = pe
			applied = true
		}
		changed = slices.DeleteFunc(changed, perEdge)
	}
	if keys != nil {
		if ok, err := srv.SetTicketKeys(keys); err != nil {
			log.Error("[unexpected] ticket keys not reloaded", "err", err)
		} else if ok {
			log.Info("ticket keys reloaded", "keys", len(keys), "file", cfg.Core.TLS.TicketKeyFile)
			applied = true
		}
	}
	switch {
	case len(changed) > 0:
		log.Warn("reload: changed keys need a restart, still running with their old values", "keys", changed)
	case !applied:
		log.Info("reload: configuration unchanged")
	}
	return cfg
}

// warnNofile warns when front.max_conns open connections could take more
// descriptors than RLIMIT_NOFILE allows (as raised by the Go runtime):
// origin.Descriptors, about 2.5 per connection in the front, two more in
// the core when it runs in this process, and a reserve for the process
// itself. Past that a flood can wedge the front and the core: the front's
// connections hold every descriptor while they wait for the core to
// accept their inner connections (docs/origin.md, "Out of descriptors").
func warnNofile(log *slog.Logger, maxConns int, core bool) {
	n := cli.NoFile()
	if need := origin.Descriptors(maxConns, core); n > 0 && uint64(need) > n {
		log.Warn("front.max_conns needs more descriptors than RLIMIT_NOFILE: a flood can wedge the front and the core",
			"max_conns", maxConns, "descriptors", need, "rlimit_nofile", n)
	}
}
