package origin

import (
	"testing"

	"github.com/edgefleet/edgefleet/relay"
)

// TestEdgeSource: two of our edges, one with source 127.0.0.3 and one with
// 127.0.0.4, in front of one real front that trusts 127.0.0.0/8. The front's
// measured address is the source of the edge that carried the bytes, the
// claimed one is the client's: the edge's `source` key (docs/edge.md) is
// what lets the demo on loopback show which edge a connection came through.
func TestEdgeSource(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.TrustedEdges = []string{"127.0.0.0/8"} })
	for _, source := range []string{"127.0.0.3", "127.0.0.4"} {
		t.Run(source, func(t *testing.T) {
			edge := startOurEdge(t, func(c *relay.Config) {
				c.Name, c.Origins, c.Source = "edge-"+source, relay.OriginList(h.addr), source
			})
			c := dialFrom(t, clientIP, edge.addr)
			p := roundTrip(t, c, nil, payload)
			c.Close()
			if p.Claimed != c.LocalAddr().String() || hostOf(t, p.Measured) != source {
				t.Fatalf("front saw claimed %q measured %q; want claimed %s, measured the edge's source %s:*",
					p.Claimed, p.Measured, c.LocalAddr(), source)
			}
		})
	}
}
