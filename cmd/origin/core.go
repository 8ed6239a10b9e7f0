package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/internal/safefile"
	"github.com/edgefleet/edgefleet/internal/ticketkeys"
	"github.com/edgefleet/edgefleet/origin"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
	"github.com/prometheus/client_golang/prometheus"
)

// coreSection is the `core:` section of the origin's configuration
// (docs/ldap-core.md). This is the seam between the front (main.go) and the LDAP routing
// core: main.go only calls defaultCore, buildCore and serveCore.
type coreSection struct {
	Enabled       bool    `mapstructure:"enabled"`
	Listen        string  `mapstructure:"listen"`
	Name          string  `mapstructure:"name"`
	ProxyMode     int     `mapstructure:"proxy_mode"`
	Config        string  `mapstructure:"config"`         // the DLP file
	DefaultServer string  `mapstructure:"default_server"` // host:port, plain mode
	TLS           coreTLS `mapstructure:"tls"`
	BackendCA     string  `mapstructure:"backend_ca"` // PEM bundle verifying ssl:1 servers (proxy_mode 2)
	MaxPDU        int     `mapstructure:"max_pdu"`    // bytes
	// Outstanding operations per client before and after a bind.
	MaxPending     int `mapstructure:"max_pending"`
	MaxPendingAuth int `mapstructure:"max_pending_auth"`
	// Bounds on a started PDU and on each write to a client.
	PDUTimeout   time.Duration `mapstructure:"pdu_timeout"`
	WriteTimeout time.Duration `mapstructure:"write_timeout"`
	// Full TLS handshakes in flight, and how long one may wait for a slot.
	MaxHandshakes         int           `mapstructure:"max_handshakes"`
	HandshakeQueueTimeout time.Duration `mapstructure:"handshake_queue_timeout"`
}

type coreTLS struct {
	Mode     string `mapstructure:"mode"` // off, tls, mtls
	Cert     string `mapstructure:"cert"`
	Key      string `mapstructure:"key"`
	ClientCA string `mapstructure:"client_ca"`
	Pins     string `mapstructure:"pins"` // `<sha256-hex> <agent-name>` lines
	StartTLS bool   `mapstructure:"starttls"`
	// Session ticket keys: a new one every TicketRotation, TicketKeys kept.
	TicketRotation time.Duration `mapstructure:"ticket_rotation"`
	TicketKeys     int           `mapstructure:"ticket_keys"`
	// TicketKeyFile, when set, holds an origin pool's shared keys
	// (internal/ticketkeys), read at start and on SIGHUP when the core
	// uses it (usesTicketKeyFile).
	TicketKeyFile string `mapstructure:"ticket_key_file"`
}

// usesTicketKeyFile reports whether the core reads ticket_key_file: only
// with TLS on and session tickets on (ticket_keys above 0). Otherwise the
// file is read neither at start nor on SIGHUP, so that the two agree.
func (t coreTLS) usesTicketKeyFile() bool {
	return t.TicketKeyFile != "" && t.Mode != core.TLSOff && t.TicketKeys > 0
}

func defaultCore() coreSection {
	d := core.DefaultConfig()
	return coreSection{
		Enabled:   true,
		Listen:    "127.0.0.1:1636",
		Name:      d.Name,
		ProxyMode: d.ProxyMode,
		Config:    "ldap_proxy.json",
		TLS:       coreTLS{Mode: d.TLSMode, StartTLS: d.StartTLS, TicketRotation: d.TicketRotation, TicketKeys: d.TicketKeys},
		MaxPDU:    d.MaxPDU,

		MaxPending:     d.MaxPending,
		MaxPendingAuth: d.MaxPendingAuth,
		PDUTimeout:     d.PDUTimeout,
		WriteTimeout:   d.WriteTimeout,

		MaxHandshakes:         d.HandshakeSlots,
		HandshakeQueueTimeout: d.HandshakeQueueTimeout,
	}
}

// ExitDLP is the exit status for a DLP file with errors.
const ExitDLP = 19

// dlpError is a DLP file error, exit status 19; main prints one line per
// error of the list.
func dlpError(err error) error { return cli.Exit(ExitDLP, err) }

// peerTable is the front's peer table as the core sees it.
type peerTable interface {
	Lookup(port int) (origin.Peer, bool)
}

// buildCore checks the core section and builds the LDAP routing core
// (nil when disabled) without listening: configuration is checked before
// anything listens. peers is the front's peer table (for claimed/measured
// lookups by the core's client port). A bad DLP file's error carries exit
// status 19 (cli.Die prints it).
func buildCore(cfg coreSection, peers peerTable, log *slog.Logger, reg prometheus.Registerer) (*core.Server, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	ccfg, err := cfg.coreConfig()
	if err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
		return nil, fmt.Errorf("core.listen: %q is not host:port", cfg.Listen)
	}
	var file *dlp.File
	if cfg.ProxyMode >= 1 {
		file, err = dlp.ParseFile(cfg.Config)
		if errors.Is(err, fs.ErrNotExist) {
			file, err = nil, nil // plain mode; core.New warns
		}
		if err != nil {
			return nil, dlpError(err)
		}
	}
	var lookup core.PeerLookup
	if peers != nil {
		lookup = func(port int) (core.Peer, bool) {
			p, ok := peers.Lookup(port)
			return core.Peer{Claimed: p.Claimed, Measured: p.Measured, Edge: p.Edge, ID: p.ID, Inner: p.Inner, Share: p.Share}, ok
		}
	}
	srv, err := core.New(ccfg, file, lookup, log, reg)
	if err != nil {
		if el := dlp.ErrorList(nil); errors.As(err, &el) {
			return nil, dlpError(err) // the file's servers do not fit the proxy mode
		}
		return nil, err
	}
	return srv, nil
}

// serveCore serves the core on ln (bound by the caller after every check)
// and adds GET /backends to mux (the peers_api mux); a listener that fails
// is sent on failed. It returns the core's Shutdown.
func serveCore(cfg coreSection, srv *core.Server, ln net.Listener, mux *http.ServeMux, log *slog.Logger, failed chan<- error) func(context.Context) error {
	if mux != nil {
		mux.Handle("/backends", srv.BackendsHandler())
	}
	mode := "dlp"
	if srv.Plain() {
		mode = "plain"
	}
	log.Info("core listening", "addr", ln.Addr().String(), "mode", mode, "name", cfg.Name, "proxy_mode", cfg.ProxyMode,
		"tls", cfg.TLS.Mode, "config", cfg.Config)
	go func() {
		if err := srv.Serve(ln); err != nil {
			failed <- fmt.Errorf("core: %w", err)
		}
	}()
	return srv.Shutdown
}

// coreConfig reads the certificate, CA, pins and ticket key files named by
// the section (the ticket key file only when the core uses it).
func (cfg coreSection) coreConfig() (core.Config, error) {
	c := core.DefaultConfig()
	c.Name, c.ProxyMode, c.DefaultServer, c.MaxPDU = cfg.Name, cfg.ProxyMode, cfg.DefaultServer, cfg.MaxPDU
	c.TLSMode, c.StartTLS = cfg.TLS.Mode, cfg.TLS.StartTLS
	c.MaxPending, c.MaxPendingAuth = cfg.MaxPending, cfg.MaxPendingAuth
	c.PDUTimeout, c.WriteTimeout = cfg.PDUTimeout, cfg.WriteTimeout
	c.HandshakeSlots, c.HandshakeQueueTimeout = cfg.MaxHandshakes, cfg.HandshakeQueueTimeout
	c.TicketRotation, c.TicketKeys = cfg.TLS.TicketRotation, cfg.TLS.TicketKeys
	switch c.TLSMode {
	case core.TLSOff, core.TLSOn, core.TLSMTLS:
	default: // before asking for files a mode that does not exist would need
		return c, fmt.Errorf("core.tls.mode: %q is not off, tls or mtls", c.TLSMode)
	}
	if c.TLSMode != core.TLSOff {
		if cfg.TLS.Cert == "" || cfg.TLS.Key == "" {
			return c, fmt.Errorf("core.tls.mode %s needs core.tls.cert and core.tls.key", c.TLSMode)
		}
		cert, err := safefile.X509KeyPair(cfg.TLS.Cert, cfg.TLS.Key)
		if err != nil {
			return c, fmt.Errorf("core.tls.cert: %w", err)
		}
		c.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		if cfg.TLS.ClientCA != "" {
			pool, err := loadPool(cfg.TLS.ClientCA)
			if err != nil {
				return c, fmt.Errorf("core.tls.client_ca: %w", err)
			}
			c.TLS.ClientCAs = pool
		}
	}
	pins, err := readPins(cfg.TLS.Pins)
	if err != nil {
		return c, err
	}
	c.Pins = pins
	if cfg.TLS.usesTicketKeyFile() {
		keys, err := readTicketKeys(cfg.TLS.TicketKeyFile)
		if err != nil {
			return c, err
		}
		c.SharedTicketKeys = keys
	}
	if cfg.BackendCA != "" {
		pool, err := loadPool(cfg.BackendCA)
		if err != nil {
			return c, fmt.Errorf("core.backend_ca: %w", err)
		}
		c.BackendTLS = &tls.Config{RootCAs: pool}
	}
	return c, c.Validate()
}

// readPins reads the pins file at path; "" is no pins.
func readPins(path string) (map[string]string, error) {
	if path == "" {
		return nil, nil
	}
	data, err := readConfigFile("core.tls.pins", path, maxPinsFile, false)
	if err != nil {
		return nil, err
	}
	pins, err := core.ParsePins(data)
	if err != nil {
		return nil, fmt.Errorf("core.tls.pins %s: %w", path, err)
	}
	return pins, nil
}

// reloadPins re-reads the pins file at path (core.tls.pins, which may have
// changed too) and, when its pins differ from those in force, swaps them
// into srv: the next handshakes are checked against them, open sessions go
// on. A file that cannot be read or parsed, or a set the running TLS mode
// refuses, changes nothing and is the error. undo puts the previous pins
// back (a later step of the reload failed).
func reloadPins(srv *core.Server, path string, log *slog.Logger) (applied bool, undo func(), err error) {
	pins, err := readPins(path)
	if err != nil {
		return false, nil, err
	}
	was := srv.Pins()
	if maps.Equal(pins, was) {
		return false, func() {}, nil
	}
	if err := srv.SetPins(pins); err != nil {
		return false, nil, err
	}
	log.Info("pins reloaded", "pins", len(pins), "was", len(was), "added", pinNames(pins, was), "removed", pinNames(was, pins))
	return true, func() { srv.SetPins(was) }, nil
}

// readTicketKeys reads an origin pool's ticket key file, in the order the
// core wants them (the key that encrypts first). The file must be private
// (readConfigFile): its keys mint tickets.
func readTicketKeys(path string) ([][32]byte, error) {
	raw, err := readConfigFile("core.tls.ticket_key_file", path, ticketkeys.MaxFile, true)
	if err != nil {
		return nil, err
	}
	keys, err := ticketkeys.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("core.tls.ticket_key_file %s: %w", path, err)
	}
	return keys.ForTLS(), nil
}

// pinNames are the agent names of the pins of a that b does not hold (a
// renamed pin is in both directions), sorted.
func pinNames(a, b map[string]string) []string {
	names := []string{}
	for fp, name := range a {
		if other, ok := b[fp]; !ok || other != name {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := safefile.Read(path, safefile.MaxConfig, nil)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", path)
	}
	return pool, nil
}
