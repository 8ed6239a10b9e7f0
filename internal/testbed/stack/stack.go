// Package stack starts edgefleet's own servers in-process for tests that
// need the whole path an agent sees: our edges (relay) in front of the
// origin front and the LDAP core with mTLS, routing to a real slapd.
//
//	o := stack.Start(t)                 // slapd, core (mtls), front
//	edge := o.Edge(t, "edge-1")         // an edge dialing the front; edge.Addr
//	conf := o.AgentTLS()                // the agent's client TLS config
//	o.StopFront()                       // the origin is gone; edges still accept
//
// It lives beside testbed, not in it, because relay and origin tests
// import testbed and this package imports them.
package stack

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

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

	front *origin.Front
}

// Start runs a slapd, a core in mtls mode trusting PKI's CA that routes
// every operation to the slapd, and a front trusting PROXY headers from
// 127.0.0.1, all stopped when the test ends.
func Start(t testing.TB) *Origin {
	t.Helper()
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})[0]
	o := &Origin{PKI: testbed.NewPKI(t), Slapd: sl, Logs: &testbed.Buffer{}}
	log := slog.New(slog.NewJSONHandler(o.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	host, port, _ := net.SplitHostPort(sl.Addr)
	file, err := dlp.Parse("ldap_proxy.json", []byte(fmt.Sprintf(`[
  {"object": "Defaults", "ConnectTimeout": 3, "OfflineRetryTimeout": 10},
  {"object": "LdapServer", "name": "L1", "host": %q, "port": %s, "ssl": 0},
  {"object": "LdapProxy", "name": "ldapConfiguration", "default": ["L1"]}
]`, host, port)))
	if err != nil {
		t.Fatal(err)
	}
	table := origin.NewPeerTable()
	cc := core.DefaultConfig()
	cc.TLSMode = core.TLSMTLS
	cc.TLS = &tls.Config{Certificates: []tls.Certificate{o.PKI.Server}, ClientCAs: o.PKI.Pool}
	lookup := func(port int) (core.Peer, bool) {
		p, ok := table.Lookup(port)
		return core.Peer{Claimed: p.Claimed, Measured: p.Measured, Edge: p.Edge, ID: p.ID}, ok
	}
	srv, err := core.New(cc, file, lookup, log.With("part", "core"), nil)
	if err != nil {
		t.Fatal(err)
	}
	coreLn := listen(t)
	o.Core = coreLn.Addr().String()
	go srv.Serve(coreLn)
	t.Cleanup(func() { shutdown(srv.Shutdown) })

	fc := origin.DefaultConfig()
	fc.Inner = o.Core
	fc.TrustedEdges = []string{"127.0.0.1"}
	o.front, err = origin.New(fc, table, log.With("part", "front"), nil)
	if err != nil {
		t.Fatal(err)
	}
	frontLn := listen(t)
	o.Front = frontLn.Addr().String()
	go o.front.Serve(frontLn)
	t.Cleanup(func() {
		o.StopFront()
		if t.Failed() {
			t.Logf("origin log:\n%s", o.Logs.String())
		}
	})
	return o
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

// EdgeTo starts an edge named name on listen relaying to origin (host:port).
func EdgeTo(t testing.TB, name, listen, origin string) *Edge {
	t.Helper()
	cfg := relay.DefaultConfig()
	cfg.Name = name
	cfg.Origins = []string{origin}
	cfg.ConnectTimeout = time.Second
	cfg.DrainTimeout = 200 * time.Millisecond // Stop is an edge going away, not a long drain
	e, err := relay.New(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	go e.Serve(ln)
	t.Cleanup(func() { shutdown(e.Shutdown) })
	return &Edge{Name: name, Addr: ln.Addr().String(), relay: e}
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func shutdown(f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	f(ctx)
}
