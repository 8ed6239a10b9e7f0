package origin

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/relay"
	"github.com/pires/go-proxyproto"
	"github.com/prometheus/client_golang/prometheus"
)

// TestThroughOurEdge: client → our edge (relay, PROXY v2 with the unique
// id and edge name TLVs) → the front → an inner service that looks itself
// up: claimed is the client's address, measured is the edge's, and the
// edge name and id match the edge's own log line.
func TestThroughOurEdge(t *testing.T) {
	for _, version := range []string{relay.ProxyV2, relay.ProxyV1} {
		t.Run(version, func(t *testing.T) {
			// The edge dials the front from 127.0.0.1: that is the edge.
			h := newHarness(t, func(c *Config) { c.TrustedEdges = []string{"127.0.0.1"} })
			edge := startOurEdge(t, func(c *relay.Config) { c.Origins, c.ProxyProtocol = relay.OriginList(h.addr), version })

			c := dialFrom(t, clientIP, edge.addr)
			p := roundTrip(t, c, nil, payload)
			c.Close()
			h.settled()
			eventually(t, "the edge's close line", func() bool { return len(edge.logs.JSONLines("connection closed")) == 1 })
			edgeLine := edge.logs.JSONLines("connection closed")[0]

			if p.Claimed != c.LocalAddr().String() || hostOf(t, p.Measured) != "127.0.0.1" {
				t.Fatalf("inner saw claimed %q measured %q; want claimed %s, measured the edge (127.0.0.1:*)", p.Claimed, p.Measured, c.LocalAddr())
			}
			wantEdge, wantID, wantHeader := "edge-ams-1", edgeLine["id"], HeaderV2
			if version == relay.ProxyV1 { // v1 has no TLVs
				wantEdge, wantID, wantHeader = "", "", HeaderV1
			}
			if p.Edge != wantEdge || p.ID != wantID || p.Header != wantHeader {
				t.Fatalf("inner saw edge %q id %q header %q; want %q, %q (the edge's log line: %v), %q",
					p.Edge, p.ID, p.Header, wantEdge, wantID, edgeLine, wantHeader)
			}
			if version == relay.ProxyV2 && p.ID == "" {
				t.Fatal("the edge sent no unique id")
			}
			lines := h.logs.JSONLines("connection closed")
			if len(lines) != 1 || lines[0]["id"] != p.ID || lines[0]["claimed"] != p.Claimed || lines[0]["edge"] != p.Edge {
				t.Fatalf("front's close line %v does not match %+v", lines, p)
			}
		})
	}
}

// ourEdge is an edge (relay) in front of the harness's front, with its log
// and metrics at hand.
type ourEdge struct {
	addr string
	logs *testbed.Buffer
	reg  *prometheus.Registry
}

// startOurEdge starts an edge named edge-ams-1 on loopback, its
// configuration as set (the origins at least).
func startOurEdge(t *testing.T, set func(*relay.Config)) *ourEdge {
	t.Helper()
	cfg := relay.DefaultConfig()
	cfg.Name = "edge-ams-1"
	set(&cfg)
	oe := &ourEdge{logs: &testbed.Buffer{}, reg: prometheus.NewRegistry()}
	edge, err := relay.New(cfg, slog.New(slog.NewJSONHandler(oe.logs, nil)), oe.reg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	oe.addr = ln.Addr().String()
	go edge.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		edge.Shutdown(ctx)
	})
	return oe
}

// TestEdgeRefusesClientProxyHeader: a client whose first
// bytes are a PROXY header of its own — v1 or v2, whole or a byte at a
// time, from a raw socket or from HAProxy's send-proxy-v2 — is refused by
// the edge, counted and logged, in every proxy_protocol mode. Behind an
// edge with proxy_protocol off, the front used to honour such a header as
// the trusted edge's claim. A plain client of the same edge still passes.
func TestEdgeRefusesClientProxyHeader(t *testing.T) {
	v1 := []byte("PROXY TCP4 6.6.6.6 127.0.0.1 1 2\r\n")
	h2 := proxyproto.HeaderProxyFromAddrs(2, &net.TCPAddr{IP: net.ParseIP("6.6.6.6"), Port: 1},
		&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 2})
	v2, err := h2.Format()
	if err != nil {
		t.Fatal(err)
	}
	for _, version := range []string{relay.ProxyOff, relay.ProxyV2} {
		t.Run(version, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.TrustedEdges = []string{"127.0.0.1"} })
			edge := startOurEdge(t, func(c *relay.Config) { c.Origins, c.ProxyProtocol = relay.OriginList(h.addr), version })
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("edge log:\n%s", edge.logs.String())
				}
			})
			// check: c is closed without a byte, and the edge counted and
			// logged a refusal (of client, when known: HAProxy's source
			// port is its own).
			refusals := func() int { return len(edge.logs.JSONLines("client proxy header refused")) }
			check := func(t *testing.T, c net.Conn, client string, before int) {
				t.Helper()
				expectClosed(t, c)
				eventually(t, "the refusal counted", func() bool {
					n := float64(len(edge.logs.JSONLines("client proxy header refused")))
					return n > float64(before) &&
						metricValue(t, edge.reg, "edgefleet_edge_client_proxy_headers_total", nil) == n &&
						metricValue(t, edge.reg, "edgefleet_edge_connections_total", map[string]string{"result": relay.ResultClientProxy}) == n
				})
				lines := edge.logs.JSONLines("client proxy header refused")
				if client != "" && lines[len(lines)-1]["client"] != client {
					t.Fatalf("refusal line %v, want one for %s", lines[len(lines)-1], client)
				}
			}
			for _, tc := range []struct {
				name  string
				hdr   []byte
				split bool
			}{{"v1", v1, false}, {"v2", v2, false}, {"v1 byte by byte", v1, true}, {"v2 byte by byte", v2, true}} {
				t.Run(tc.name, func(t *testing.T) {
					before := refusals()
					c := dialFrom(t, clientIP, edge.addr)
					msg := append(append([]byte{}, tc.hdr...), payload...)
					if tc.split { // one segment per byte: the edge's first read sees a prefix
						for _, b := range msg[:len(tc.hdr)] {
							if _, err := c.Write([]byte{b}); err != nil {
								break // refused at the end of the signature
							}
							time.Sleep(2 * time.Millisecond)
						}
						msg = msg[len(tc.hdr):]
					}
					c.Write(msg) // may fail: the edge may have closed already
					check(t, c, c.LocalAddr().String(), before)
				})
			}
			t.Run("haproxy send-proxy-v2", func(t *testing.T) {
				hp := testbed.FreeAddr(t, "127.0.0.1")
				testbed.HAProxy(t, `
frontend fe
    bind `+hp+`
    default_backend be
backend be
    server edge `+edge.addr+` send-proxy-v2
`, hp)
				before := refusals()
				c := dialFrom(t, clientIP, hp)
				c.Write(payload)
				check(t, c, "", before)
			})
			t.Run("plain client passes", func(t *testing.T) {
				c := dialFrom(t, clientIP, edge.addr)
				p := roundTrip(t, c, nil, payload)
				if version == relay.ProxyV2 && p.Claimed != c.LocalAddr().String() {
					t.Fatalf("claimed %q, want %s", p.Claimed, c.LocalAddr())
				}
				if version == relay.ProxyOff && p.Claimed != "" {
					t.Fatalf("claimed %q through an edge that sends no header", p.Claimed)
				}
			})
		})
	}
}
