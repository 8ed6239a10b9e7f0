package origin

import (
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/tokenbucket"
	"github.com/prometheus/client_golang/prometheus"
)

// newTestShares is shares as New makes them, with the refusal counters on
// a registry of their own.
func newTestShares(t *testing.T, conns int, rate tokenbucket.Rate) (*shares, *prometheus.Registry) {
	t.Helper()
	m := newMetrics(NewPeerTable())
	reg := prometheus.NewRegistry()
	if err := reg.Register(m.refused); err != nil {
		t.Fatal(err)
	}
	return newShares(conns, rate, rate.String(), m.refused), reg
}

func refusedOf(t *testing.T, reg prometheus.Gatherer, edge, reason string) float64 {
	t.Helper()
	return metricValue(t, reg, "edgefleet_front_edge_refused_total", map[string]string{"edge": edge, "reason": reason})
}

// TestSharesExact: per_edge's limits to the connection, on a clock the
// test moves: a burst, then refusals until time refills the bucket at the
// rate; every trusted edge has a bucket and a count of its own, every
// untrusted source shares one; the cap refuses without taking a token and
// is released on close; idle shares are forgotten by the sweep.
func TestSharesExact(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	edgeA, edgeB := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	admit := func(s *shares, ip netip.Addr, trusted bool, at time.Time, want string) *share {
		t.Helper()
		sh, got, _ := s.admit(ip, trusted, at)
		if got != want {
			t.Fatalf("admit(%s, trusted %v) at +%v = %q, want %q", ip, trusted, at.Sub(t0), got, want)
		}
		return sh
	}

	t.Run("rate", func(t *testing.T) {
		s, reg := newTestShares(t, 0, tokenbucket.Rate{PerSec: 2, Burst: 3})
		for range 3 {
			admit(s, edgeA, true, t0, "")
		}
		admit(s, edgeA, true, t0, RefusedRate)
		admit(s, edgeA, true, t0.Add(499*time.Millisecond), RefusedRate) // 0.998 of a token
		admit(s, edgeB, true, t0, "")                                    // its own bucket
		admit(s, edgeA, true, t0.Add(500*time.Millisecond), "")
		admit(s, edgeA, true, t0.Add(500*time.Millisecond), RefusedRate)
		admit(s, edgeA, true, t0.Add(time.Hour), "") // refilled to the burst, not beyond
		admit(s, edgeA, true, t0.Add(time.Hour), "")
		admit(s, edgeA, true, t0.Add(time.Hour), "")
		admit(s, edgeA, true, t0.Add(time.Hour), RefusedRate)
		if a, b := refusedOf(t, reg, "192.0.2.1", RefusedRate), refusedOf(t, reg, "192.0.2.2", RefusedRate); a != 4 || b != 0 {
			t.Errorf("refused rate: %v for 192.0.2.1 (want 4), %v for 192.0.2.2 (want 0)", a, b)
		}
	})

	t.Run("untrusted share one bucket", func(t *testing.T) {
		s, reg := newTestShares(t, 0, tokenbucket.Rate{PerSec: 1, Burst: 2})
		admit(s, netip.MustParseAddr("198.51.100.1"), false, t0, "")
		admit(s, netip.MustParseAddr("2001:db8::1"), false, t0, "")
		admit(s, netip.MustParseAddr("198.51.100.2"), false, t0, RefusedRate)
		admit(s, edgeA, true, t0, "")
		if n := refusedOf(t, reg, UntrustedShare, RefusedRate); n != 1 {
			t.Errorf("untrusted refused %v, want 1", n)
		}
		if n := s.edges(); n != 1 {
			t.Errorf("%d edges with a share of their own, want 1 (the untrusted sources have none)", n)
		}
	})

	t.Run("mapped address is its IPv4 edge", func(t *testing.T) {
		s, _ := newTestShares(t, 1, tokenbucket.Rate{})
		admit(s, edgeA, true, t0, "")
		admit(s, netip.MustParseAddr("::ffff:192.0.2.1"), true, t0, RefusedConns)
	})

	t.Run("conns", func(t *testing.T) {
		s, reg := newTestShares(t, 2, tokenbucket.Rate{PerSec: 1, Burst: 3})
		a1 := admit(s, edgeA, true, t0, "")
		admit(s, edgeA, true, t0, "")
		admit(s, edgeA, true, t0, RefusedConns) // no token taken
		admit(s, edgeB, true, t0, "")
		s.release(a1)
		admit(s, edgeA, true, t0, "") // the third token
		admit(s, edgeA, true, t0, RefusedConns)
		if n := refusedOf(t, reg, "192.0.2.1", RefusedConns); n != 2 {
			t.Errorf("refused conns %v, want 2", n)
		}
	})

	t.Run("sweep", func(t *testing.T) {
		s, _ := newTestShares(t, 10, tokenbucket.Rate{PerSec: 1, Burst: 1})
		held := admit(s, edgeA, true, t0, "")
		s.release(admit(s, edgeB, true, t0, ""))
		// A minute on: edgeB holds nothing (its bucket full again) and
		// goes; edgeA still holds a connection and stays.
		s.release(admit(s, netip.MustParseAddr("192.0.2.3"), true, t0.Add(sweepEvery), ""))
		if n := s.edges(); n != 2 {
			t.Fatalf("%d shares after the sweep, want 2 (the held edge and the new one)", n)
		}
		s.release(held)
		admit(s, edgeA, true, t0.Add(3*sweepEvery), "")
		if n := s.edges(); n != 1 {
			t.Fatalf("%d shares after the second sweep, want 1", n)
		}
	})

	t.Run("set", func(t *testing.T) {
		s, _ := newTestShares(t, 2, tokenbucket.Rate{PerSec: 1, Burst: 4})
		a1 := admit(s, edgeA, true, t0, "")
		a2 := admit(s, edgeA, true, t0, "")
		if _, _, limit := s.admit(edgeA, true, t0); limit != "2" {
			t.Errorf("refused for conns with limit %q, want 2", limit)
		}
		// A higher cap: the two open still count, the third gets in; a
		// burst cut to 1 leaves the bucket (2 of 4 left) one token.
		s.set(3, tokenbucket.Rate{PerSec: 1, Burst: 1}, "1/s")
		a3 := admit(s, edgeA, true, t0.Add(time.Millisecond), "")
		admit(s, edgeA, true, t0.Add(2*time.Millisecond), RefusedConns)
		s.release(a1)
		if _, reason, limit := s.admit(edgeA, true, t0.Add(3*time.Millisecond)); reason != RefusedRate || limit != "1/s" {
			t.Errorf("refused for %q with limit %q, want rate and 1/s", reason, limit)
		}
		// No limits: nothing is taken, and the connections admitted
		// before are still given back without harm.
		s.set(0, tokenbucket.Rate{}, "0")
		for range 10 {
			if sh := admit(s, edgeA, true, t0, ""); sh != nil {
				t.Fatal("a share taken with no limit set")
			}
		}
		s.release(a2)
		s.release(a3) // edgeA holds none of the connections admitted under a limit
		// A cap again: the ten admitted while off (still open) do not
		// count; the first after it does.
		s.set(1, tokenbucket.Rate{}, "0")
		admit(s, edgeA, true, t0, "")
		admit(s, edgeA, true, t0, RefusedConns)
	})

	t.Run("off", func(t *testing.T) {
		s, _ := newTestShares(t, 0, tokenbucket.Rate{})
		for range 100 {
			if sh := admit(s, edgeA, true, t0, ""); sh != nil {
				t.Fatal("a share taken with no limit set")
			}
		}
	})
}

// TestPerEdgeRate: over real sockets, on the front's clock frozen by the
// test, each trusted edge address opens per_edge.burst connections and
// the next is closed at once, counted under its measured address, logged
// with suppressed, inner never dialled; the claimed address of each
// header changes nothing (it is not a key); the other edge and the
// untrusted sources keep their own buckets; an hour later the edge gets
// one more (rate 1/h).
func TestPerEdgeRate(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.TrustedEdges = []string{"127.0.0.2", "127.0.0.3"}
		c.PerEdge = PerEdge{Conns: 0, Rate: "1/h", Burst: 3}
	})
	h.clock.Freeze()
	through := func(ip string, i int) {
		t.Helper()
		c := h.dialFrom(ip)
		var hdr []byte
		if ip == "127.0.0.2" || ip == "127.0.0.3" {
			hdr = v2Header(t, "192.0.2."+strconv.Itoa(10+i)+":50000", "198.51.100.1:636", "edge-ams-1", "")
		}
		roundTrip(t, c, hdr, payload)
		c.Close()
	}
	refused := func(ip, edge string, n float64) {
		t.Helper()
		before := h.inner.count()
		expectClosed(t, h.dialFrom(ip))
		eventually(t, "the refusal counted", func() bool {
			return refusedOf(t, h.reg, edge, RefusedRate) == n && h.metric(conns(HeaderNone, ResultEdgeLimit)) >= n
		})
		if h.inner.count() != before {
			t.Fatal("inner dialled for a refused connection")
		}
	}
	for i := range 3 {
		through("127.0.0.2", i) // a new claimed address each time
	}
	refused("127.0.0.2", "127.0.0.2", 1)
	for i := range 3 {
		through("127.0.0.3", i)
	}
	refused("127.0.0.3", "127.0.0.3", 1)
	through(clientIP, 0)
	through("127.0.0.10", 0) // untrusted too: the same share
	through(clientIP, 0)
	refused("127.0.0.11", UntrustedShare, 1)
	refused("127.0.0.2", "127.0.0.2", 2)

	h.clock.Advance(time.Hour)
	through("127.0.0.2", 4)
	refused("127.0.0.2", "127.0.0.2", 3)
	if n := h.metric(conns(HeaderNone, ResultEdgeLimit)); n != 5 {
		t.Errorf("connections_total{result=edge-limit} = %v, want 5", n)
	}

	lines := h.logs.JSONLines("edge over its share refused")
	if len(lines) != 5 {
		t.Fatalf("%d refusal lines, want 5: %v", len(lines), lines)
	}
	l := lines[0]
	if l["share"] != "127.0.0.2" || l["reason"] != RefusedRate || l["limit"] != "1/h" || hostOf(t, l["measured"].(string)) != "127.0.0.2" || l["suppressed"] != 0.0 {
		t.Errorf("refusal line %v", l)
	}
	if l := lines[2]; l["share"] != UntrustedShare || hostOf(t, l["measured"].(string)) != "127.0.0.11" {
		t.Errorf("untrusted refusal line %v", l)
	}
}

// TestPerEdgeConns: an edge at per_edge.conns open connections has the
// next closed at once (reason conns) while another edge is served; one
// closed, the edge is served again.
func TestPerEdgeConns(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.TrustedEdges = []string{"127.0.0.2", "127.0.0.3"}
		c.PerEdge = PerEdge{Conns: 2, Rate: "0"}
	})
	var open []*net.TCPConn
	for range 2 {
		c := h.dialFrom("127.0.0.2")
		roundTrip(t, c, nil, payload)
		open = append(open, c)
	}
	expectClosed(t, h.dialFrom("127.0.0.2"))
	eventually(t, "the refusal counted", func() bool { return refusedOf(t, h.reg, "127.0.0.2", RefusedConns) == 1 })
	other := h.dialFrom("127.0.0.3")
	roundTrip(t, other, nil, payload)
	other.Close()

	open[0].Close()
	eventually(t, "the edge's connection released", func() bool { return h.metric("edgefleet_origin_connections_active", nil) == 1 })
	c := h.dialFrom("127.0.0.2")
	roundTrip(t, c, nil, payload)
	expectClosed(t, h.dialFrom("127.0.0.2"))
	eventually(t, "the second refusal counted", func() bool { return refusedOf(t, h.reg, "127.0.0.2", RefusedConns) == 2 })
	if n := refusedOf(t, h.reg, "127.0.0.3", RefusedConns) + refusedOf(t, h.reg, "127.0.0.2", RefusedRate); n != 0 {
		t.Errorf("%v other refusals", n)
	}
	if l := h.logs.JSONLines("edge over its share refused"); len(l) != 2 || l[0]["limit"] != "2" || l[0]["reason"] != RefusedConns {
		t.Errorf("refusal lines %v", l)
	}
}
