package origin

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Result values of the result label of edgefleet_origin_connections_total.
const (
	ResultOK         = "ok"          // forwarded to inner, counted when forwarding starts
	ResultEmpty      = "empty"       // closed before its first byte (health check): no log line
	ResultTimeout    = "timeout"     // first bytes or header not in within header_timeout
	ResultBadHeader  = "bad-header"  // a trusted source sent a malformed, truncated or oversized header
	ResultSpoofed    = "spoofed"     // a header from outside trusted_edges
	ResultUntrusted  = "untrusted"   // untrusted: reject, source outside trusted_edges
	ResultNoHeader   = "no-header"   // require_header, a trusted source sent none
	ResultInnerError = "inner-error" // inner could not be dialled
	ResultShutdown   = "shutdown"    // accepted while the front was shutting down, or cut by a forced shutdown before forwarding
	ResultMaxConns   = "max-conns"   // refused: front.max_conns connections already open
	ResultLoop       = "loop"        // came from one of the front's own inner connections (inner is the front): closed
	ResultEdgeLimit  = "edge-limit"  // refused at accept: its edge over front.per_edge (edgefleet_front_edge_refused_total says which)
)

type metrics struct {
	conns    *prometheus.CounterVec
	okConns  [4]prometheus.Counter // conns{header, "ok"}, indexed like headers
	spoofed  prometheus.Counter
	timeouts prometheus.Counter
	active   prometheus.Gauge
	entries  prometheus.GaugeFunc
	refused  *prometheus.CounterVec // edgefleet_front_edge_refused_total{edge, reason}
}

// headers are the values of the header label, in the order of
// metrics.okConns.
var headers = [4]string{HeaderV2, HeaderV1, HeaderLocal, HeaderNone}

func newMetrics(table *PeerTable) *metrics {
	m := &metrics{
		conns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgefleet_origin_connections_total",
			Help: "Connections accepted by the origin front, by header seen and outcome.",
		}, []string{"header", "result"}),
		spoofed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgefleet_origin_spoofed_headers_total",
			Help: "PROXY headers received from a source outside trusted_edges (connection closed).",
		}),
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgefleet_origin_header_timeouts_total",
			Help: "Connections closed because their first bytes or header did not arrive within header_timeout.",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgefleet_origin_connections_active",
			Help: "Connections the origin front holds open now.",
		}),
		entries: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "edgefleet_origin_peer_table_entries",
			Help: "Entries in the peer table (one per open inner connection).",
		}, func() float64 { return float64(table.Len()) }),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgefleet_front_edge_refused_total",
			Help: "Connections the front refused at accept because their edge (the measured source inside trusted_edges, or \"untrusted\") was over front.per_edge, by reason (rate, conns).",
		}, []string{"edge", "reason"}),
	}
	for i, h := range headers {
		m.okConns[i] = m.conns.WithLabelValues(h, ResultOK)
	}
	return m
}

// ok is the counter of forwarded connections with header h, resolved once
// rather than looked up by label for every connection.
func (m *metrics) ok(h string) prometheus.Counter {
	for i, v := range headers {
		if v == h {
			return m.okConns[i]
		}
	}
	return m.conns.WithLabelValues(h, ResultOK)
}

func (m *metrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.conns, m.spoofed, m.timeouts, m.active, m.entries, m.refused} {
		errs = append(errs, reg.Register(c))
	}
	return errors.Join(errs...)
}
