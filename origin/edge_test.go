package origin

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/relay"
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
			cfg := relay.DefaultConfig()
			cfg.Name = "edge-ams-1"
			cfg.Origins = []string{h.addr}
			cfg.ProxyProtocol = version
			edgeLogs := &testbed.Buffer{}
			edge, err := relay.New(cfg, slog.New(slog.NewJSONHandler(edgeLogs, nil)), nil)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go edge.Serve(ln)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				edge.Shutdown(ctx)
			})

			c := dialFrom(t, clientIP, ln.Addr().String())
			p := roundTrip(t, c, nil, payload)
			c.Close()
			h.settled()
			eventually(t, "the edge's close line", func() bool { return len(edgeLogs.JSONLines("connection closed")) == 1 })
			edgeLine := edgeLogs.JSONLines("connection closed")[0]

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
