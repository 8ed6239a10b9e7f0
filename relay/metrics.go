package relay

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Results of a connection: the `reason` of its log line and the `result`
// label of edgefleet_edge_connections_total.
const (
	ResultEOF         = "eof"          // both sides finished cleanly
	ResultEmpty       = "empty"        // closed without a byte either way (health check); no log line
	ResultClientError = "client-error" // a read or write on the client side failed first
	ResultServerError = "server-error" // a read or write on the origin side failed first
	ResultNoOrigin    = "no-origin"    // every origin tried failed to connect
	ResultMaxConns    = "max-conns"    // refused: max_conns connections already open
	ResultDrain       = "drain"        // still open at the end of drain_timeout, closed by Shutdown
	ResultLoop        = "loop"         // came from one of the edge's own origin connections (an origin is this edge): closed
	ResultClientProxy = "client-proxy" // the client's first bytes were a PROXY header of its own: refused
	// ResultLocalResources: refused, the dial to an origin failed for lack
	// of the edge's own descriptors or memory (errclass.LocalResources:
	// EMFILE, ENFILE, ENOBUFS, ENOMEM, ENOSPC), or no origin had a local
	// port left (EADDRNOTAVAIL); no origin was marked OFFLINE.
	ResultLocalResources = "local-resources"
	// ResultRateLimited: refused before any dial, its source, its prefix
	// or the whole edge over its rate of new connections (limits).
	ResultRateLimited = "rate-limited"
	// ResultConnLimit: refused before any dial, its source or its prefix
	// holding its most connections, or the table full of open ones.
	ResultConnLimit = "conn-limit"
	// Refusals of the TLS gate (tls_gate): the origin was never dialled.
	ResultNotTLS       = "not-tls"       // the first bytes were no well-formed ClientHello (or one over 16389 bytes)
	ResultHelloTimeout = "hello-timeout" // no whole ClientHello within tls_gate.hello_timeout
	ResultWrongSNI     = "wrong-sni"     // a ClientHello without SNI or for a name not in tls_gate.server_names
)

var results = []string{ResultEOF, ResultEmpty, ResultClientError, ResultServerError, ResultNoOrigin, ResultMaxConns, ResultDrain, ResultLoop, ResultClientProxy, ResultLocalResources,
	ResultRateLimited, ResultConnLimit, ResultNotTLS, ResultHelloTimeout, ResultWrongSNI}

type metrics struct {
	active   prometheus.Gauge
	total    map[string]prometheus.Counter // by result, curried once
	up, down prometheus.Counter
	dial     prometheus.Histogram
	originUp *prometheus.GaugeVec
	// clientProxy counts clients refused for sending a PROXY header.
	clientProxy prometheus.Counter
	// entries reports how many keys each admission table holds (set by
	// New; nil: none).
	entries func() (source, prefix int)
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	total := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgefleet_edge_connections_total",
		Help: "Client connections by how they ended.",
	}, []string{"result"})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgefleet_edge_bytes_total",
		Help: "Payload bytes relayed (PROXY header excluded), counted when a connection closes; up is client to origin.",
	}, []string{"direction"})
	m := &metrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgefleet_edge_connections_active",
			Help: "Client connections open now.",
		}),
		total: map[string]prometheus.Counter{},
		up:    bytes.WithLabelValues("up"),
		down:  bytes.WithLabelValues("down"),
		dial: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "edgefleet_edge_origin_dial_seconds",
			Help:    "Time to connect to an origin, failed attempts included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		originUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgefleet_edge_origin_up",
			Help: "1 when the origin is selectable, 0 while it is OFFLINE after a failed connect.",
		}, []string{"origin"}),
		clientProxy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgefleet_edge_client_proxy_headers_total",
			Help: "Clients refused because their first bytes were a PROXY header (v1 or v2) of their own.",
		}),
	}
	for _, r := range results {
		m.total[r] = total.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.active, total, bytes, m.dial, m.originUp, m.clientProxy, m.tableGauge("source"), m.tableGauge("prefix")} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// tableGauge is edgefleet_edge_limit_table_entries{table}: the keys one
// admission table holds, read when scraped.
func (m *metrics) tableGauge(table string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "edgefleet_edge_limit_table_entries",
		Help:        "Keys an admission table holds (table: source or prefix), at most limits.table_size.",
		ConstLabels: prometheus.Labels{"table": table},
	}, func() float64 {
		if m.entries == nil {
			return 0
		}
		s, p := m.entries()
		if table == "source" {
			return float64(s)
		}
		return float64(p)
	})
}
