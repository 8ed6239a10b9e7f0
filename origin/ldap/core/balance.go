package core

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
	"github.com/prometheus/client_golang/prometheus"
)

// Load balancing (docs/balancers.md) as the session sees it: a balance(LB)
// rule, user or operation routing, picks a server for every operation
// from dlp.Balancers; the operation then goes to the client's connection
// to that server, opened (and bound with the saved credentials) the
// first time the client needs it — attach does both, as for an
// OperationRouting forwardto rule. Every operation sent to a server counts
// as in flight there until it is over, which makes the servers'
// saturation.

// balanceRule is rule when its action is balance(LB), else nil.
func balanceRule(rule *dlp.Rule) *dlp.Rule {
	if rule != nil && rule.Balance != "" {
		return rule
	}
	return nil
}

// balanced sends o to the server rule's balancer picks for it, failing
// over along the balancer's order.
func (ss *session) balanced(o *op, rule *dlp.Rule) {
	o.rule = rule
	cands := ss.srv.balancers.Select(rule.Balance, dlp.Op{Type: o.name, FilterAttrs: o.m.FilterAttrs})
	// The next page of a paged search stays on the connection that issued
	// its cookie while that server is a candidate: anywhere else the core
	// would restart the search from its beginning (paged.go).
	if o.paged != nil && o.paged.Cookie != "" {
		if ch, ok := ss.chains[o.paged.Cookie]; ok && !ch.be.closed {
			if i := slices.Index(cands, ch.be.name); i > 0 {
				cands = append([]string{cands[i]}, slices.Delete(slices.Clone(cands), i, i+1)...)
			}
		}
	}
	if !rule.Failover && len(cands) > 1 {
		cands = cands[:1]
	}
	if len(cands) == 0 {
		ss.reply(o, wire.ResultUnavailable, ss.noServer(o, rule, fmt.Sprintf("LoadBalancer %s has no route up for this %s", rule.Balance, o.name)))
		return
	}
	// No ring: the balancer's order is the whole failover order, and the
	// servers before the chosen one just failed.
	b, rest, diag := ss.attach(cands, nil, o.m.Op != wire.TagBindRequest)
	if b == nil {
		ss.unserved(o, rule, diag)
		return
	}
	o.cands = rest
	ss.send(o, b)
}

// sameIdentity keeps the connections bound with prev (identity
// generation prevGen) when the bind that just succeeded sent the same
// simple credentials: they carry the identity in force, and a client
// that binds again as itself — per operation, as connection pools do —
// does not make the core re-bind every server a balancer spreads it over.
func (ss *session) sameIdentity(prev []byte, prevGen uint64) {
	if prev == nil || !ss.credOK {
		return
	}
	a, okA := wire.AfterID(prev)
	b, okB := wire.AfterID(ss.cred)
	if !okA || !okB || !bytes.Equal(a, b) {
		return
	}
	for _, c := range ss.conns {
		if c.gen == prevGen {
			c.gen = ss.gen
		}
	}
}

// pend records o as pending on b. A client that reuses the id of an
// operation still pending is disconnected before this (onClient); should
// another operation hold the id all the same, o replaces it, and it no
// longer counts as in flight.
func (ss *session) pend(o *op, b *backend) {
	if old := ss.pending[o.m.ID]; old != nil && old != o {
		ss.track(old, nil)
	}
	ss.pending[o.m.ID] = o
	ss.track(o, b)
}

// track moves o's place in the in-flight counts to b's server (b nil: o
// is over). Every change of where an operation is pending goes through
// it, so that the counts cannot drift.
func (ss *session) track(o *op, b *backend) {
	if o.owes != nil && (b == nil || o.owes != b.heard) {
		o.owes.done()
		o.owes = nil
	}
	name := ""
	if b != nil {
		name = b.name
	}
	if o.load == name || ss.srv.load == nil {
		return
	}
	if o.load != "" {
		ss.srv.load.End(o.load)
	}
	if name != "" {
		ss.srv.load.Begin(name)
	}
	o.load = name
}

// owe counts o, just written to b, as an answer b's server owes
// (progress.go) until track moves it elsewhere or ends it.
func (ss *session) owe(o *op, b *backend) {
	if o.owes != b.heard {
		b.heard.owe()
		o.owes = b.heard
	}
}

// firstAnswer bounds the wait for a fresh backend connection's first
// answer by ConnectTimeout: a server whose process is frozen (SIGSTOP, or
// hung) still completes the TCP handshake in the kernel, and without a
// bound a session whose first server it is would wait for ever. A
// connection that carries the client's identity was probed before its
// re-bind (rebind); on any other the reader gives up after ConnectTimeout
// without a PDU from the server (answered), which counts as a connect
// failure: the server is OFFLINE and the operation fails over (a write
// has an unknown outcome, as after any failure once sent). The bound is
// renewed while the server sends on other connections (progress.go): a
// busy server is not a frozen one.
//
// The bound applies to the core's own request only: a root DSE search
// sent ahead of the client's first one, which a live server answers at
// once, and whose answer is swallowed. The client's request — a bind
// whose password hash takes seconds, a search that takes long before its
// first entry — is never bounded. Nothing here waits with the session's
// lock held, so a client that gives up still ends its session at once.
// The search uses the re-binds' message id (2147483647), which a client
// may use too: the client's operations for the connection are held until
// the search is answered (send, release), so no answer of the server's
// can belong to both.
func (ss *session) firstAnswer(b *backend) error {
	b.probe, b.holding = true, true
	b.probeAt = time.Now()
	if err := b.boundFirst(ss.srv.file.Defaults.ConnectTimeout); err != nil {
		return err
	}
	_, err := b.conn.Write(wire.RootDSESearch(rebindID))
	return err
}

// boundFirst sets the first-answer bound: limit from now, and the mark
// of the server's progress it is judged by.
func (b *backend) boundFirst(limit time.Duration) error {
	b.mark = b.heard.count()
	b.firstBy = time.Now().Add(limit)
	return b.conn.SetReadDeadline(b.firstBy)
}

// answered lifts the first-answer bound once the server has sent a PDU,
// names it when it expired (errStillBusy when the server was busy
// meanwhile: the bound is renewed — for busyLimit from the search's
// sending at most, so that no session waits for ever on a server that
// serves its other connections but never this one), and tells the
// reader to skip the answers to the core's own search. Only the
// backend's reader calls it, for every PDU.
func (b *backend) answered(raw []byte, err error, limit time.Duration) (skip bool, _ error) {
	if err == nil {
		b.heard.heard()
	}
	switch {
	case b.firstBy.IsZero() && !b.probe:
		return false, err
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !b.firstBy.IsZero():
		busy := b.heard.busy(b.mark)
		if waited := time.Since(b.probeAt); busy && waited >= busyLimit {
			return false, fmt.Errorf("no answer to the core's root DSE search within %v, though the server was busy all along: it takes no new work: %w", waited.Round(time.Second), err)
		}
		if busy {
			if err := b.boundFirst(limit); err != nil {
				return false, err
			}
			return false, errStillBusy
		}
		return false, fmt.Errorf("no answer to the core's root DSE search within ConnectTimeout (%v), nothing from the server on any other connection, and no client request it owed an answer to for less than %v: %w", limit, busyLimit, err)
	case err != nil:
		return false, err
	}
	if !b.firstBy.IsZero() {
		b.firstBy = time.Time{}
		b.conn.SetReadDeadline(time.Time{})
	}
	if id, tag, ok := wire.Peek(raw); ok && b.probe && id == rebindID {
		if wire.IsFinal(tag) {
			b.probe = false
		}
		return true, nil
	}
	return false, nil
}

// backendCollector serves the backends' state at scrape time, so that it
// is never stale: up (selectable) and saturation.
type backendCollector struct {
	s          *Server
	up, satDes *prometheus.Desc
}

func newBackendCollector(s *Server) *backendCollector {
	return &backendCollector{s: s,
		up: prometheus.NewDesc("edgefleet_core_backend_up",
			"1 when the LdapServer is selectable, 0 while it is OFFLINE (after a failure, or down by the monitor).", []string{"server"}, nil),
		satDes: prometheus.NewDesc("edgefleet_core_backend_saturation",
			"Saturation of the LdapServer in percent: operations in flight ÷ capacity × 100, smoothed over MonitorInterval; 100 while OFFLINE.", []string{"server"}, nil),
	}
}

func (c *backendCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.up; ch <- c.satDes }

func (c *backendCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	if s.file == nil {
		return
	}
	for _, name := range s.file.ServerOrder {
		st := s.backendState(name)
		up := 0.0
		if st.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, name)
		ch <- prometheus.MustNewConstMetric(c.satDes, prometheus.GaugeValue, st.Saturation, name)
	}
}

// startBalancing sets up the load, the balancers and their metrics, and
// starts the monitor. Plain mode has none of them.
func (s *Server) startBalancing(reg prometheus.Registerer) error {
	s.load = dlp.NewLoad(s.file, s.now)
	s.balancers = dlp.NewBalancers(s.file, s.health, s.load)
	alerts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgefleet_core_saturation_alerts_total",
		Help: "Times an LdapServer's saturation reached the alert level of a saturation LoadBalancer (once per crossing).",
	}, []string{"balancer", "server"})
	for _, c := range []prometheus.Collector{alerts, newBackendCollector(s)} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	s.balancers.Alert = func(lb, server string, sat float64) {
		alerts.WithLabelValues(lb, server).Inc()
		s.log.Warn("saturation alert", "target", server, "balancer", lb, "saturation", sat,
			"alert", s.file.Balancers[lb].Alert, "in_flight", s.load.InFlight(server))
	}
	s.monitor = newMonitor(s)
	return nil
}

var _ prometheus.Collector = (*backendCollector)(nil)
