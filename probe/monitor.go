package probe

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/edgefleet/edgefleet/internal/clock"
	"github.com/prometheus/client_golang/prometheus"
)

// Monitor is the platform's view of the edges: each round it resolves the
// name through the system resolver, as agents do (a direct DNS query once
// failed outright on a host whose resolver pointed at itself, and the
// system resolver is what real traffic uses, so it returns the same
// list), and for every address takes the TCP connect time (the round
// trip to the edge itself) and the full TLS handshake time (through the
// tunnel to the origin and back) on one socket. Health is the handshake:
// an edge whose origin is gone still answers TCP perfectly.
type Monitor struct {
	Config Config // Name, Port, Budget, Interval
	// TLS verifies the origin's certificate against the name (ServerName
	// defaults to Config.Name); a client certificate is optional.
	TLS      *tls.Config
	Resolver *net.Resolver // nil: the system resolver
	// Now, if non-nil, is used instead of time.Now (internal/clock): the
	// clock of measured_at.
	Now func() time.Time
	Log *slog.Logger

	m      *monitorMetrics
	mu     sync.Mutex
	status Status
	seen   map[string]bool // addresses with series
	last   []string        // the last address set the name resolved to
}

// Status is the monitor's last round: GET /status, and `--once`.
type Status struct {
	Name       string    `json:"name"`
	MeasuredAt time.Time `json:"measured_at"`
	Error      string    `json:"error,omitempty"` // resolution failed
	// Edges is the set the name resolved to; when it did not resolve,
	// the last set it resolved to, probed again, none of them up.
	Edges []EdgeStatus `json:"edges"`
}

// EdgeStatus is one address of a monitor round.
type EdgeStatus struct {
	Addr           string  `json:"addr"`
	Up             bool    `json:"up"`
	TCPConnectMS   float64 `json:"tcp_connect_ms"`
	TLSHandshakeMS float64 `json:"tls_handshake_ms"`
	Error          string  `json:"error,omitempty"`
}

type monitorMetrics struct {
	tcp, tls, up, resolve *prometheus.GaugeVec
}

// errUnresolved is the status error of an edge whose handshake completed
// while the name did not resolve.
var errUnresolved = errors.New("handshake completed, but the name does not resolve: no agent can find this edge")

// NewMonitor checks cfg, its zero fields given their defaults as
// NewDialer does, and registers the monitor's metrics with reg (nil: not
// registered).
func NewMonitor(cfg Config, conf *tls.Config, reg prometheus.Registerer) (*Monitor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("probe config: %w", err)
	}
	m := &Monitor{Config: cfg, TLS: conf, seen: map[string]bool{}, m: &monitorMetrics{
		tcp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgefleet_probe_tcp_connect_seconds",
			Help: "TCP connect time to the edge in the last monitor round."}, []string{"addr"}),
		tls: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgefleet_probe_tls_handshake_seconds",
			Help: "Full TLS handshake time through the edge to the origin, same socket as the connect."}, []string{"addr"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgefleet_probe_edge_up",
			Help: "1 when the name resolved to the edge and the TLS handshake through it completed in the last round."}, []string{"addr"}),
		resolve: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgefleet_probe_resolve_up",
			Help: "1 when the name resolved in the last round, 0 when the resolver failed."}, []string{"name"}),
	}}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.m.tcp, m.m.tls, m.m.up, m.m.resolve} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("probe: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *Monitor) now() time.Time {
	return clock.Now(m.Now)
}

// Round measures every address once, updates the metrics and the status,
// and returns it. When the name does not resolve the monitor does not go
// blind: it says so (log, edgefleet_probe_resolve_up 0, Status.Error) and
// probes the last set it resolved to again, so the times and errors still
// tell which edges answer, but edge_up is 0 for all of them: no agent
// can find an edge through a name that does not resolve.
func (m *Monitor) Round(ctx context.Context) Status {
	st := Status{Name: m.Config.Name, MeasuredAt: m.now(), Edges: []EdgeStatus{}}
	addrs, err := Resolve(ctx, m.Resolver, m.Config.Name)
	m.mu.Lock()
	if err != nil {
		st.Error = err.Error()
		addrs = m.last
		if ctx.Err() == nil {
			m.log().Warn("name does not resolve: no edge is up", "target", m.Config.Name, "err", err)
		}
	} else {
		m.last = addrs
	}
	m.m.resolve.WithLabelValues(m.Config.Name).Set(b2f(err == nil))
	m.mu.Unlock()

	conf := verifyAs(m.TLS, m.Config.Name)
	results := make([]Result, len(addrs))
	parallel(len(addrs), func(i int) {
		addr := net.JoinHostPort(addrs[i], strconv.Itoa(m.Config.Port))
		results[i] = probe(ctx, m.Config.dialer(), addr, conf, m.Config.Budget, false)
	})

	m.mu.Lock()
	defer m.mu.Unlock()
	now := map[string]bool{}
	for _, r := range results {
		now[r.Addr] = true
		e := EdgeStatus{Addr: r.Addr, Up: r.OK && err == nil, TCPConnectMS: r.TCPConnectMS, TLSHandshakeMS: r.TLSHandshakeMS, Error: r.Error}
		if r.OK && err != nil {
			e.Error = errUnresolved.Error()
		}
		st.Edges = append(st.Edges, e)
		m.m.up.WithLabelValues(r.Addr).Set(b2f(e.Up))
		m.set(m.m.tcp, r.Addr, r.TCPConnectMS)
		m.set(m.m.tls, r.Addr, r.TLSHandshakeMS)
		if !r.OK {
			m.log().Warn("edge down", "edge", r.Addr, "target", m.Config.Name, "err", r.Error)
		}
	}
	for a := range m.seen {
		if !now[a] {
			m.m.up.DeleteLabelValues(a)
			m.m.tcp.DeleteLabelValues(a)
			m.m.tls.DeleteLabelValues(a)
		}
	}
	m.seen = now
	m.status = st
	return st
}

// set records a stage's time, or removes the series when the stage did
// not complete (a zero would read as an instant edge).
func (m *Monitor) set(g *prometheus.GaugeVec, addr string, msec float64) {
	if msec > 0 {
		g.WithLabelValues(addr).Set(msec / 1000)
	} else {
		g.DeleteLabelValues(addr)
	}
}

func (m *Monitor) log() *slog.Logger {
	if m.Log != nil {
		return m.Log
	}
	return slog.New(slog.DiscardHandler)
}

// Run runs a Round now and then every Interval until ctx ends.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.Config.Interval)
	defer t.Stop()
	for {
		m.Round(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Status is the last round's status.
func (m *Monitor) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}

// ServeHTTP answers GET /status with the last round as JSON.
func (m *Monitor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(m.Status())
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var _ http.Handler = (*Monitor)(nil)
