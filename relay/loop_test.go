package relay

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestEdgesRelayingToEachOtherV2: two edges whose origins point at each
// other (or at the fleet's name). Each edge dials its origin before it
// reads the client's first bytes, so the refusal of the other edge's
// PROXY header (client-proxy) ends each relayed connection at once but
// not the chain: it goes on, one connection at a time, as fast as the
// edges can accept and dial — never piling up connections (with
// proxy_protocol off it does, until descriptors run out). The client is
// closed at once, both edges count client-proxy refusals, and the chain
// stops when the configuration no longer loops (docs/edge.md).
func TestEdgesRelayingToEachOtherV2(t *testing.T) {
	a := startEdge(t, Config{Name: "edge-a", Origins: OriginList("127.0.0.1:1")})
	b := startEdge(t, Config{Name: "edge-b", Origins: OriginList(a.addr)})
	a.SetOrigins(OriginList(b.addr))

	c, err := net.Dial("tcp", a.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, "x")
	if n, err := io.Copy(io.Discard, c); err != nil || n != 0 {
		t.Fatalf("the client got %d bytes, %v; want the connection closed", n, err)
	}
	refused := func(e *testEdge) float64 {
		if v := e.metric(t, "edgefleet_edge_connections_total", "result", ResultClientProxy); v != nil {
			return *v
		}
		return 0
	}
	waitFor(t, func() bool { return refused(a) >= 10 && refused(b) >= 10 }, "both edges refuse each other's PROXY headers")
	most := 0.0
	for range 20 {
		for _, e := range []*testEdge{a, b} {
			most = max(most, *e.metric(t, "edgefleet_edge_connections_active"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if most > 10 {
		t.Errorf("%v connections open at once on an edge: the chain piles up", most)
	}
	a.SetOrigins(OriginList("127.0.0.1:1")) // the operator's fix: A's origin is no longer an edge
	waitFor(t, func() bool {
		before := refused(a) + refused(b)
		time.Sleep(300 * time.Millisecond)
		return refused(a)+refused(b) == before
	}, "the chain stops once the configuration no longer loops")
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: not yet: %s", what)
		}
	}
}
