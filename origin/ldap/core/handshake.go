package core

import (
	"container/list"
	"crypto"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/edgefleet/edgefleet/internal/splice"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultHandshakeQueueTimeout is how long a full TLS handshake may wait
// for a slot (docs/ldap-core.md).
const DefaultHandshakeQueueTimeout = 5 * time.Second

// DefaultHandshakeSlots is the number of full TLS handshakes in flight at
// once: one per CPU, since a handshake is CPU work from start to end (the
// signature, the key exchange) and more at once only makes each slower.
func DefaultHandshakeSlots() int { return runtime.NumCPU() }

// gate bounds the full TLS handshakes in flight and serves the ones
// waiting round robin across edges: one FIFO queue per edge, keyed by the
// address the front measured (edgeKey), never by the address an edge
// claims. A flood through one edge fills that edge's queue; every other
// edge's next handshake is at most one turn per busy edge away. A waiter
// still queued after its deadline is dropped: at the latest by a timer,
// and at the turn it would have been served when the core's clock says its
// deadline has passed, so a test's clock decides without waiting.
// Resumed handshakes (a ticket the core's keys decrypt) do not pass the
// gate.
type gate struct {
	slots  int
	wait   time.Duration
	now    func() time.Time
	queued *prometheus.GaugeVec

	mu     sync.Mutex
	busy   int
	queues map[string]*list.List // of *waiter
	ring   []string              // edges with waiters, in turn order
	next   int                   // index in ring of the edge served next
	trace  func(event, edge string)
}

type waiter struct {
	edge  string
	since time.Time
	el    *list.Element
	ready chan bool // true: the slot is the waiter's; false: its deadline passed
}

func newGate(slots int, wait time.Duration, now func() time.Time, queued *prometheus.GaugeVec) *gate {
	if slots <= 0 {
		slots = DefaultHandshakeSlots()
	}
	if wait <= 0 {
		wait = DefaultHandshakeQueueTimeout
	}
	return &gate{slots: slots, wait: wait, now: now, queued: queued, queues: map[string]*list.List{}}
}

// acquire waits for a slot for a full handshake from edge; ok false means
// the deadline passed first. release gives the slot back (to the next
// waiter, if any).
func (g *gate) acquire(edge string) (release func(), ok bool) {
	g.mu.Lock()
	if g.busy < g.slots {
		g.busy++
		g.event("granted", edge)
		g.mu.Unlock()
		return g.release, true
	}
	w := &waiter{edge: edge, since: g.now(), ready: make(chan bool, 1)}
	q := g.queues[edge]
	if q == nil {
		q = list.New()
		g.queues[edge] = q
		g.ring = append(g.ring, edge)
	}
	w.el = q.PushBack(w)
	g.queued.WithLabelValues(edge).Inc()
	g.event("queued", edge)
	g.mu.Unlock()

	t := time.NewTimer(g.wait)
	defer t.Stop()
	select {
	case ok := <-w.ready:
		return g.release, ok
	case <-t.C:
	}
	g.mu.Lock()
	if w.el != nil { // still queued
		g.remove(w)
		g.mu.Unlock()
		return nil, false
	}
	g.mu.Unlock()
	if <-w.ready { // handed the slot as the timer fired
		return g.release, true
	}
	return nil, false
}

// release hands the slot to the waiter at the head of the next edge's
// queue, dropping those whose deadline has passed, or frees it.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.ring) > 0 {
		if g.next >= len(g.ring) {
			g.next = 0
		}
		edge := g.ring[g.next]
		w := g.queues[edge].Front().Value.(*waiter)
		if g.remove(w) {
			g.next++ // the edge keeps its place; the next one's turn
		}
		if g.now().Sub(w.since) >= g.wait {
			w.ready <- false
			continue
		}
		g.event("granted", edge)
		w.ready <- true
		return
	}
	g.busy--
}

// remove takes w out of its queue and reports whether the queue still has
// waiters; an emptied queue leaves the ring and the gauge.
func (g *gate) remove(w *waiter) (left bool) {
	q := g.queues[w.edge]
	q.Remove(w.el)
	w.el = nil
	if q.Len() > 0 {
		g.queued.WithLabelValues(w.edge).Dec()
		return true
	}
	delete(g.queues, w.edge)
	g.queued.DeleteLabelValues(w.edge)
	for i, e := range g.ring {
		if e == w.edge {
			g.ring = append(g.ring[:i], g.ring[i+1:]...)
			if i < g.next {
				g.next--
			}
			break
		}
	}
	return false
}

func (g *gate) event(event, edge string) {
	if g.trace != nil {
		g.trace(event, edge)
	}
}

// edgeKey is the queue of a connection: the front's share of it (the
// trusted edge's address, or one queue, "untrusted", for every other
// source: N direct clients take one turn, not N), else the host the
// front measured, without its port.
func edgeKey(p Peer) string {
	if p.Share != "" {
		return p.Share
	}
	if a, err := netip.ParseAddrPort(p.Measured); err == nil {
		return a.Addr().Unmap().String()
	}
	return p.Measured
}

// Handshake results of edgefleet_core_handshakes_total.
const (
	hsOK           = "ok"            // the handshake completed
	hsFailed       = "failed"        // it failed: a bad hello, an unverifiable certificate, a timeout, a close
	hsUnpinned     = "unpinned"      // the client certificate is not pinned (a fresh or a resumed session)
	hsQueueTimeout = "queue_timeout" // it waited for a slot past handshake_queue_timeout and was closed
	hsAbandoned    = "abandoned"     // its client half-closed after the ClientHello: closed before any signature
)

type handshakeMetrics struct {
	total  *prometheus.CounterVec
	queued *prometheus.GaugeVec
}

func newHandshakeMetrics(reg prometheus.Registerer) (*handshakeMetrics, error) {
	m := &handshakeMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgefleet_core_handshakes_total",
			Help: "TLS handshakes the core ended, by kind (full or resumed from a session ticket) and result (ok, failed, unpinned, queue_timeout, abandoned).",
		}, []string{"kind", "result"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgefleet_core_handshakes_queued",
			Help: "Full TLS handshakes waiting for a slot, by edge (the address the front measured).",
		}, []string{"edge"}),
	}
	for _, kind := range []string{"full", "resumed"} {
		for _, r := range []string{hsOK, hsFailed, hsUnpinned, hsQueueTimeout, hsAbandoned} {
			if kind == "resumed" && (r == hsQueueTimeout || r == hsAbandoned) {
				continue // a resumed handshake never waits
			}
			m.total.WithLabelValues(kind, r)
		}
	}
	for _, c := range []prometheus.Collector{m.total, m.queued} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Refusal log lines (failed handshakes, refused connections): at most
// refusalBurst per refusalWindow, the next one let through counting those
// suppressed, so a flood of bad handshakes cannot fill the disk.
const (
	refusalBurst  = 10
	refusalWindow = 10 * time.Second
)

// hsConn is the connection a server handshake runs on (the client's
// bytes, its first record peeked), with what the gate needs to know of
// it. The gate stands where the CPU is spent: the signature. A full
// handshake signs (TLS 1.3 CertificateVerify, TLS 1.2 ServerKeyExchange);
// a resumed one never does, whatever its hello offered — so a ticket
// the keys decrypt but crypto/tls does not resume from (another cipher
// suite, too old) still waits its turn. The slot is held only while the
// signature is made: a client that stops reading after the server's
// first flight holds none.
type hsConn struct {
	*splice.Conn
	raw     net.Conn // the TCP socket: peerGone reads its state
	peer    Peer
	full    bool   // the handshake came to its signature: a full one
	refused string // hsQueueTimeout or hsAbandoned when the gate closed it
}

var (
	errQueueTimeout = errors.New("no handshake slot within core.handshake_queue_timeout: closed")
	errAbandoned    = errors.New("the client half-closed after its ClientHello: closed before the signature")
)

// gateCert is the TLS config's GetCertificate: it hands out the
// certificate with a key (gatedSigner) that waits for a slot before it
// signs. A connection that did not come through a session (no hsConn)
// gets the certificate as it is.
func (s *Server) gateCert(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert := s.pickCert(hello)
	hc, ok := hello.Conn.(*hsConn)
	if cert == nil || !ok {
		return cert, nil // crypto/tls says "no certificates configured" for nil
	}
	signer, ok := cert.PrivateKey.(crypto.Signer)
	if !ok {
		return cert, nil // crypto/tls refuses such a key itself
	}
	gated := *cert
	gated.PrivateKey = &gatedSigner{Signer: signer, srv: s, hc: hc}
	return &gated, nil
}

// pickCert chooses among the configured certificates as crypto/tls would
// (the first the client supports, else the first; nil when there is none).
func (s *Server) pickCert(hello *tls.ClientHelloInfo) *tls.Certificate {
	if len(s.certs) == 0 {
		return nil
	}
	for i := range s.certs {
		if hello.SupportsCertificate(&s.certs[i]) == nil {
			return &s.certs[i]
		}
	}
	return &s.certs[0]
}

// gatedSigner signs for a full handshake once its edge's turn gives it a
// slot (round robin, the queue deadline), and gives the slot back. A
// client that has already half-closed (a replayed hello: connect, write,
// close) is closed before it queues and again when its slot comes, so a
// slot is never spent signing for nobody.
type gatedSigner struct {
	crypto.Signer
	srv *Server
	hc  *hsConn
}

func (g *gatedSigner) Sign(rand io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	hc := g.hc
	hc.full = true
	if peerGone(hc.raw) {
		hc.refused = hsAbandoned
		return nil, errAbandoned
	}
	release, ok := g.srv.gate.acquire(edgeKey(hc.peer))
	if !ok {
		hc.refused = hsQueueTimeout
		return nil, errQueueTimeout
	}
	defer release()
	if peerGone(hc.raw) {
		hc.refused = hsAbandoned
		return nil, errAbandoned
	}
	return g.Signer.Sign(rand, digest, opts)
}

// handshakeFailed logs (rate-limited) and counts a failed handshake; the
// line first, so that whoever sees the count sees the line.
func (s *Server) handshakeFailed(p Peer, kind string, err error) {
	result := hsFailed
	if errors.Is(err, errNotPinned) {
		result = hsUnpinned
	}
	s.refusal("tls handshake", p, "err", err)
	s.hsm.total.WithLabelValues(kind, result).Inc()
}

func (s *Server) handshakeDone(st tls.ConnectionState) {
	kind := "full"
	if st.DidResume {
		kind = "resumed"
	}
	s.hsm.total.WithLabelValues(kind, hsOK).Inc()
}

// refusal logs msg for the connection of p, unless refusalBurst lines have
// been written in this refusalWindow; the next line written says how many
// were suppressed.
func (s *Server) refusal(msg string, p Peer, args ...any) {
	ok, suppressed := s.refusals.Allow()
	if !ok {
		return
	}
	args = append([]any{"id", p.ID, "claimed", p.Claimed, "measured", p.Measured, "edge", p.Edge}, args...)
	s.log.Warn(msg, append(args, "suppressed", suppressed)...)
}

// startTLSHandshake reads the ClientHello's first record after a StartTLS
// response, within the handshake timeout, and completes the handshake.
func (ss *session) startTLSHandshake() bool {
	c := ss.client
	c.SetReadDeadline(time.Now().Add(ss.srv.handshakeTimeout()))
	var first [1]byte
	_, err := io.ReadFull(c, first[:])
	var raw []byte
	var tickets [][]byte
	if err == nil {
		raw, tickets, err = readHello(c, first[0])
	}
	c.SetReadDeadline(time.Time{})
	if err != nil {
		return false
	}
	return ss.handshake(raw, tickets)
}
