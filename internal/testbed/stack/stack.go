// Package stack starts edgefleet's own servers in-process for tests that
// need the whole path an agent sees: our edges (relay) in front of the
// origin front and the LDAP core with mTLS, routing to a real slapd.
//
//	o := stack.Start(t)                 // slapd, core (mtls), front
//	edge := o.Edge(t, "edge-1")         // an edge dialing the front; edge.Addr
//	conf := o.AgentTLS()                // the agent's client TLS config
//	o.StopFront()                       // the origin is gone; edges still accept
//
// New and NewEdge do the same without a test, for benchmarks. The package
// lives beside testbed, not in it, because relay and origin tests import
// testbed and this package imports them.
package stack

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/evloop"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
	"github.com/edgefleet/edgefleet/relay"
)

// Origin is a running origin: slapd, core and front on loopback.
type Origin struct {
	PKI   *testbed.PKI
	Slapd *testbed.Slapd
	Core  string // the core's address (LDAPS with client certificates)
	Front string // the front's address, which edges dial
	Logs  *testbed.Buffer

	front   *origin.Front
	mu      sync.Mutex
	closers []func() // run in reverse by Close
}

// Start runs a slapd, a core in mtls mode trusting PKI's CA that routes
// every operation to the slapd, and a front trusting PROXY headers from
// 127.0.0.1, all stopped when the test ends.
func Start(t testing.TB) *Origin {
	t.Helper()
	return StartOn(t, nil, "127.0.0.1")
}

// StartOn is Start with the front accepting on frontLn (a listener of a
// network namespace, say; nil: a free loopback port) and honouring PROXY
// headers from trusted (addresses or CIDRs).
func StartOn(t testing.TB, frontLn net.Listener, trusted ...string) *Origin {
	t.Helper()
	testbed.Need(t, "slapd", "slapadd")
	o, err := NewOn(t.TempDir(), frontLn, trusted...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		o.Close()
		if t.Failed() {
			t.Logf("origin log:\n%s", o.Logs.String())
			t.Logf("output of slapd %s:\n%s", o.Slapd.Addr, o.Slapd.Output())
		}
	})
	return o
}

// New is Start without a test, in dir (which must exist); Close stops it.
func New(dir string) (*Origin, error) { return NewOn(dir, nil, "127.0.0.1") }

// NewOn is StartOn without a test.
func NewOn(dir string, frontLn net.Listener, trusted ...string) (o *Origin, err error) {
	o = &Origin{Logs: &testbed.Buffer{}}
	defer func() {
		if err != nil {
			if frontLn != nil {
				frontLn.Close()
			}
			o.Close()
		}
	}()
	if o.PKI, err = testbed.NewPKIIn(mkdir(dir, "pki")); err != nil {
		return nil, err
	}
	if o.Slapd, err = testbed.NewSlapd(mkdir(dir, "slapd"), testbed.SlapdConfig{}); err != nil {
		return nil, err
	}
	o.onClose(o.Slapd.Stop)
	log := slog.New(slog.NewJSONHandler(o.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	host, port, _ := net.SplitHostPort(o.Slapd.Addr)
	file, err := dlp.Parse("ldap_proxy.json", []byte(fmt.Sprintf(`[
  {"object": "Defaults", "ConnectTimeout": 3, "OfflineRetryTimeout": 10},
  {"object": "LdapServer", "name": "L1", "host": %q, "port": %s, "ssl": 0},
  {"object": "LdapProxy", "name": "ldapConfiguration", "default": ["L1"]}
]`, host, port)))
	if err != nil {
		return nil, err
	}
	table := origin.NewPeerTable()
	cc := core.DefaultConfig()
	cc.TLSMode = core.TLSMTLS
	cc.TLS = &tls.Config{Certificates: []tls.Certificate{o.PKI.Server}, ClientCAs: o.PKI.Pool}
	lookup := func(port int) (core.Peer, bool) {
		p, ok := table.Lookup(port)
		return core.Peer{Claimed: p.Claimed, Measured: p.Measured, Edge: p.Edge, ID: p.ID, Inner: p.Inner, Share: p.Share}, ok
	}
	srv, err := core.New(cc, file, lookup, log.With("part", "core"), nil)
	if err != nil {
		return nil, err
	}
	coreLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o.Core = coreLn.Addr().String()
	go srv.Serve(coreLn)
	o.onClose(func() { shutdown(srv.Shutdown) })

	fc := origin.DefaultConfig()
	fc.Inner = o.Core
	fc.TrustedEdges = trusted
	if o.front, err = origin.New(fc, table, log.With("part", "front"), nil); err != nil {
		return nil, err
	}
	if frontLn == nil {
		if frontLn, err = evloop.Listen("127.0.0.1:0"); err != nil {
			return nil, err
		}
	}
	o.Front = frontLn.Addr().String()
	go o.front.Serve(frontLn)
	o.onClose(o.StopFront)
	return o, nil
}

func mkdir(dir, name string) string {
	p := filepath.Join(dir, name)
	os.MkdirAll(p, 0o700)
	return p
}

func (o *Origin) onClose(f func()) {
	o.mu.Lock()
	o.closers = append(o.closers, f)
	o.mu.Unlock()
}

// Close stops the edges made by NewEdge, the front, the core and slapd.
func (o *Origin) Close() {
	o.mu.Lock()
	cs := o.closers
	o.closers = nil
	o.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// StopFront shuts the front down: the origin is gone, its port refuses,
// and every edge in front of it still accepts TCP.
func (o *Origin) StopFront() { shutdown(o.front.Shutdown) }

// AgentTLS is the agent's client TLS config: the PKI's CA as roots, the
// agent certificate, ServerName testbed.ServerName.
func (o *Origin) AgentTLS() *tls.Config {
	return &tls.Config{RootCAs: o.PKI.Pool, Certificates: []tls.Certificate{o.PKI.Agent}, ServerName: testbed.ServerName}
}

// Edge is one of our edges, running until Stop or the end of the test.
type Edge struct {
	Name, Addr string
	relay      *relay.Edge
}

// Stop shuts the edge down: its address refuses from now on, and its open
// connections are closed after 200 ms.
func (e *Edge) Stop() { shutdown(e.relay.Shutdown) }

// Edge starts one of our edges, named name, relaying to the front with a
// PROXY v2 header, on a free loopback port.
func (o *Origin) Edge(t testing.TB, name string) *Edge {
	t.Helper()
	return EdgeTo(t, name, "127.0.0.1:0", o.Front)
}

// EdgeAt is Edge accepting on listen (ip:port), e.g. one address of an A
// set whose edges share a port.
func (o *Origin) EdgeAt(t testing.TB, name, listen string) *Edge {
	t.Helper()
	return EdgeTo(t, name, listen, o.Front)
}

// NewEdge is EdgeAt without a test: Close stops it.
func (o *Origin) NewEdge(name, listen string) (*Edge, error) {
	e, err := newEdge(name, listen, o.Front)
	if err == nil {
		o.onClose(e.Stop)
	}
	return e, err
}

// EdgeTo starts an edge named name on listen relaying to origin (host:port).
func EdgeTo(t testing.TB, name, listen, origin string) *Edge {
	t.Helper()
	e, err := newEdge(name, listen, origin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

func newEdge(name, listen, origin string) (*Edge, error) {
	cfg := relay.DefaultConfig()
	cfg.Name = name
	cfg.Origins = relay.OriginList(origin)
	cfg.ConnectTimeout = time.Second
	cfg.DrainTimeout = 200 * time.Millisecond // Stop is an edge going away, not a long drain
	e, err := relay.New(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return nil, err
	}
	ln, err := evloop.Listen(listen)
	if err != nil {
		return nil, err
	}
	go e.Serve(ln)
	return &Edge{Name: name, Addr: ln.Addr().String(), relay: e}, nil
}

func shutdown(f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	f(ctx)
}
