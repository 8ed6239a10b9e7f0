package origin

import (
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgefleet/edgefleet/internal/tokenbucket"
	"github.com/prometheus/client_golang/prometheus"
)

// UntrustedShare is the edge label of the one share every source outside
// trusted_edges has in common: a source there is not an edge, and a
// flood from a million of them must not make a million series.
const UntrustedShare = "untrusted"

// Reasons of edgefleet_front_edge_refused_total: which part of
// front.per_edge refused a connection.
const (
	RefusedRate  = "rate"  // over per_edge.rate (and its burst)
	RefusedConns = "conns" // per_edge.conns connections of the edge already open
)

// sweepEvery is how often the shares of edges that hold no connection and
// whose bucket is full again are forgotten (one comes back as it was).
const sweepEvery = time.Minute

// share is one edge's part of the front: its bucket of new connections,
// the connections it holds open, and its refusal counters.
type share struct {
	label   string // the edge label: the measured IP, or UntrustedShare
	bucket  tokenbucket.Bucket
	open    int
	refused [2]prometheus.Counter // by reason (RefusedRate, RefusedConns), resolved at the first refusal
}

// shares holds front.per_edge's state: a share per trusted edge address
// (the socket peer, never an address a header claims) and one for every
// untrusted source. The event loops call it concurrently; set (SIGHUP)
// changes the limits under them.
type shares struct {
	metric  *prometheus.CounterVec // edgefleet_front_edge_refused_total
	enabled atomic.Bool            // a cap or a rate is set
	mu      sync.Mutex
	conns   int
	rate    tokenbucket.Rate
	rateArg string // per_edge.rate as configured, for the refusal line
	byEdge  map[netip.Addr]*share
	others  share // UntrustedShare
	swept   time.Time
}

func newShares(conns int, rate tokenbucket.Rate, rateArg string, metric *prometheus.CounterVec) *shares {
	s := &shares{metric: metric, byEdge: map[netip.Addr]*share{}, others: share{label: UntrustedShare}}
	s.set(conns, rate, rateArg)
	return s
}

// set puts new limits in force (front.per_edge reloaded). Each share
// keeps its open connections and its bucket: the next connection is
// judged by the new cap, and the bucket refills at the new rate up to the
// new burst (one fuller than that is cut to it at its next use).
// Connections admitted while no limit was set count in no share: a cap
// set later counts only the connections opened after it.
func (s *shares) set(conns int, rate tokenbucket.Rate, rateArg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns, s.rate, s.rateArg = conns, rate, rateArg
	s.enabled.Store(conns > 0 || !rate.Unlimited())
}

// admit takes a new connection from ip, inside trusted_edges or not, at
// now into its edge's share, and returns that share with "" — or, when
// the edge is at per_edge.conns or over per_edge.rate, counts the refusal
// and returns its reason and the limit that refused it, as configured
// (read under the same lock: a reload cannot slip between). A nil share
// with "" means no limit is set. The cap is checked first: a connection
// refused for it takes no token.
func (s *shares) admit(ip netip.Addr, trusted bool, now time.Time) (sh *share, reason, limit string) {
	if !s.enabled.Load() {
		return nil, "", ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	sh = s.of(ip, trusted)
	switch {
	case s.conns > 0 && sh.open >= s.conns:
		reason, limit = RefusedConns, strconv.Itoa(s.conns)
	case !sh.bucket.Allow(now, s.rate):
		reason, limit = RefusedRate, s.rateArg
	default:
		sh.open++
		return sh, "", ""
	}
	s.count(sh, reason)
	return sh, reason, limit
}

// release gives back a connection admit took into sh.
func (s *shares) release(sh *share) {
	s.mu.Lock()
	sh.open--
	s.mu.Unlock()
}

// of is ip's share, made when it has none. The caller holds mu.
func (s *shares) of(ip netip.Addr, trusted bool) *share {
	if !trusted {
		return &s.others
	}
	ip = ip.Unmap().WithZone("")
	sh := s.byEdge[ip]
	if sh == nil {
		sh = &share{label: ip.String()}
		s.byEdge[ip] = sh
	}
	return sh
}

// count adds a refusal of sh for reason. The caller holds mu.
func (s *shares) count(sh *share, reason string) {
	i := 0
	if reason == RefusedConns {
		i = 1
	}
	if sh.refused[i] == nil {
		sh.refused[i] = s.metric.WithLabelValues(sh.label, reason)
	}
	sh.refused[i].Inc()
}

// sweep forgets, once per sweepEvery, the shares that hold no connection
// and whose bucket is full: the table holds the edges seen lately, not
// every address trusted_edges ever let in. The caller holds mu.
func (s *shares) sweep(now time.Time) {
	if now.Sub(s.swept) < sweepEvery && !now.Before(s.swept) {
		return
	}
	s.swept = now
	for ip, sh := range s.byEdge {
		if sh.open == 0 && sh.bucket.Full(now, s.rate) {
			delete(s.byEdge, ip)
		}
	}
}

// edges is the number of edges with a share of their own.
func (s *shares) edges() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byEdge)
}

// shareLabel is the share a connection from ip counts in: its own when
// it is a trusted edge, UntrustedShare otherwise.
func shareLabel(ip netip.Addr, trusted bool) string {
	if trusted {
		return ip.Unmap().String()
	}
	return UntrustedShare
}
