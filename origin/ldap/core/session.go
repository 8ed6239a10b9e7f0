package core

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
	"github.com/prometheus/client_golang/prometheus"
)

// A session is one client connection. Its state is guarded by mu, which
// the client reader and the reader of each backend connection take for
// every PDU they handle; decisions (routing, failover, replay) are thus
// made one at a time, while no PDU waits for a hand-off to another
// goroutine.
type session struct {
	srv    *Server
	peer   Peer
	agent  string
	client net.Conn
	raw    net.Conn     // the accepted connection, under TLS when client is TLS
	rd     *wire.Reader // the client's, over a clientReader; used by the client reader only (and by StartTLS, which it runs)
	max    atomic.Int64 // the client's PDU cap
	done   chan struct{}
	resume chan net.Conn // wakes the client reader after StartTLS

	// inPDU is set while the client reader is inside a PDU (in Next),
	// armed once clientReader has set the PDU deadline; the client
	// reader's own.
	inPDU, armed bool

	mu     sync.Mutex
	out    *clientOut // to the client (out.go)
	cut    bool       // the client is disconnected without what is still queued for it
	isTLS  bool
	ended  bool // set by whoever ends the session; close acts on it
	closed bool

	// The identity in force: the bind DN as sent, its normalised form for
	// rules, and the bind request that established it (re-sent with the
	// core's own message id on a new backend connection).
	user, norm string
	cred       []byte
	credOK     bool   // cred can be replayed (simple or one-step SASL bind)
	credWhy    string // when !credOK and not a SASL identity: why (passwd.go)
	gen        uint64 // identity generation; backend.gen records which one a connection carries
	sasl       *backend

	selected bool
	primary  *backend  // the user target
	lbRule   *dlp.Rule // the user rule when it is balance(LB): every operation picks its server (balance.go)
	cands    []string  // the user target's server first, then the failover order
	ring     []string  // the list cands walks, wrapping (ringOf)
	starved  bool      // the last attach stopped out of local resources (unserved answers busy)

	conns   []*backend
	pending map[int32]*op
	seq     uint64

	chains     map[string]pagedChain // by the cookie last handed to the client
	chainOrder []string

	counters [4]opsCounter // opsCounter's, most recently added first

	// lines are the backend connections, for abort: a write to a server
	// that stopped reading holds mu, and only closing its connection
	// frees it.
	linesMu sync.Mutex
	lines   map[net.Conn]struct{}
	aborted bool
}

type op struct {
	m     *wire.Message // the request: msg
	msg   wire.Message
	name  string
	start time.Time
	seq   uint64
	be    *backend
	sent  bool
	rule  *dlp.Rule // the OperationRouting rule that routed it, or a balance(LB) user rule; nil for the user target
	load  string    // the server where it counts as in flight (track)
	owes  *progress // the server that owes its answer once sent (owe, track)
	cands []string  // with rule: the server used first, then the failover order
	ring  []string  // with rule: the list cands walks, wrapping
	// failed are the servers that failed while this operation was in
	// flight there: a replay tries every other server once.
	failed []string
	// Search entries and references forwarded to the client, those seen
	// from the current backend, and how many of those to drop: a replayed
	// search skips what the client already has.
	forwarded, seen, skip int
	// A paged search: its paging control, the entries of earlier pages,
	// and (when restarted on another server, restarted) those to drop
	// before this page.
	paged        *wire.Paged
	chainN, base int
	restarted    bool
	// follows: a search that stays open for the server's changes (sync.go).
	follows follow
}

func newSession(srv *Server, c net.Conn, p Peer) *session {
	ss := &session{srv: srv, peer: p, client: c, raw: c, done: make(chan struct{}),
		resume: make(chan net.Conn, 1), pending: map[int32]*op{}, gen: 1, lines: map[net.Conn]struct{}{}}
	ss.max.Store(PreBindMaxPDU)
	return ss
}

// run serves the session in the caller's goroutine, which reads the
// client; it returns when the session has ended.
func (ss *session) run() {
	ss.client = newRawSock(ss.client)
	ss.raw = ss.client
	if !ss.accept() {
		ss.client.Close()
		return
	}
	ss.out = newClientOut(ss)
	ss.readClient()
	ss.mu.Lock()
	ss.ended = true
	ss.settle()
	ss.mu.Unlock()
	<-ss.out.done // the last bytes written, the writing side shut
	ss.drain()
}

// A session's client connection ends with a FIN after the last byte the
// core wrote (a Notice of Disconnection, say), then the core reads and
// drops what the client still sends for up to drainTime (and drainMax
// bytes) before it closes: closing with unread input would reset the
// connection, and the reset can overtake the notice on its way through
// the front.
const (
	drainTime = time.Second
	drainMax  = 1 << 20
)

// clientWriter bounds every write to the client by WriteTimeout, per
// 64 KiB: a client that stops reading is disconnected (the write fails
// and the session ends), one that reads slowly is not.
//
// The deadline is moved only once a 64th of WriteTimeout has passed since
// it was set: every write still gets at least 63/64 of it, and a busy
// connection changes its deadline a few times per WriteTimeout instead of
// once per response.
type clientWriter struct {
	c     net.Conn
	d     time.Duration
	until time.Time // the write deadline in force
}

func (w *clientWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if now := time.Now(); w.until.Sub(now) < w.d-w.d/64 {
			w.until = now.Add(w.d)
			w.c.SetWriteDeadline(w.until)
		}
		k, err := w.c.Write(p[n:min(len(p), n+writePiece)])
		n += k
		if err != nil {
			return n, fmt.Errorf("write to the client: %w", err)
		}
	}
	return n, nil
}

// clientReader is the stream under the client's wire.Reader. Inside a
// PDU, the first read that has to wait for more bytes sets the PDU
// deadline (readClient clears it): a PDU that arrived whole, as most do,
// costs no deadline.
type clientReader struct {
	r  io.Reader
	ss *session
}

func (c clientReader) Read(p []byte) (int, error) {
	if ss := c.ss; ss.inPDU && !ss.armed {
		ss.armed = true
		ss.raw.SetReadDeadline(time.Now().Add(orDefault(ss.srv.cfg.PDUTimeout)))
	}
	return c.r.Read(p)
}

// shutWrite ends the writing side of the client connection; the client
// reader then stops within drainTime.
func (ss *session) shutWrite() {
	if tc, ok := ss.client.(*tls.Conn); ok {
		tc.CloseWrite() // close_notify (RFC 4511 §5.3)
	}
	cw, ok := ss.raw.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		ss.raw.Close()
		return
	}
	ss.raw.SetReadDeadline(time.Now().Add(drainTime))
}

// drain drops what the client still sends, bounded, and closes.
func (ss *session) drain() {
	ss.raw.SetReadDeadline(time.Now().Add(drainTime))
	io.CopyN(io.Discard, ss.raw, drainMax)
	ss.raw.Close()
}

// settle runs after every handler, with mu held: it sends what was
// written for the client when flush is true, and closes everything once
// the session has ended.
func (ss *session) settle(flush ...bool) {
	if !ss.ended && (len(flush) == 0 || flush[0]) {
		if err := ss.out.Flush(); err != nil {
			ss.writeFailed(err)
		}
	}
	if !ss.ended || ss.closed {
		return
	}
	ss.closed = true
	close(ss.done)
	ss.out.close(ss.cut) // the writer sends what is queued, then shutWrite
	// Operations the client will never get an answer to still get their
	// line (a write's outcome is unknown to everyone from here).
	for _, o := range ss.opsOn(nil) {
		delete(ss.pending, o.m.ID)
		ss.track(o, nil)
		ss.log(o, o.be.name, "unanswered")
	}
	for _, b := range slices.Clone(ss.conns) {
		ss.closeBackend(b)
	}
}

// readClient frames the client's PDUs and handles each. After a StartTLS
// request it waits until that is settled: the stream changes under it.
//
// It does not wait for a bind's result, so that a client closing while a
// server sits on its bind is seen at once. The cap may change meanwhile: a
// client sends nothing before its BindResponse (RFC 4511 §4.2.1), and the
// cap is raised before that response is written, so a PDU over the cap
// it was framed with is framed again with the current one (the Reader
// consumes nothing when it refuses a length).
func (ss *session) readClient() {
	for {
		limit := ss.max.Load()
		ss.rd.SetMax(int(limit))
		// Idle is fine; a PDU once started must complete in PDUTimeout
		// (clientReader arms it when Next has to wait for more).
		err := ss.rd.Await()
		var raw []byte
		if err == nil {
			ss.inPDU = true
			raw, err = ss.rd.Next()
			ss.inPDU = false
			if ss.armed {
				ss.armed = false
				ss.raw.SetReadDeadline(time.Time{})
			}
		}
		if errors.Is(err, wire.ErrTooLarge) && ss.max.Load() > limit {
			continue
		}
		// The cap may shrink too: a bind that fails or is anonymous,
		// after one that succeeded, lowers it before its response is
		// written, while this PDU was awaited with the bound cap.
		if now := ss.max.Load(); err == nil && now < limit && int64(len(raw)) > now {
			err = &wire.ProtocolError{Kind: wire.ErrTooLarge, Offset: 1, Detail: fmt.Sprintf("pdu of %d bytes exceeds %d", len(raw), now)}
		}
		var o *op
		if err == nil {
			o = new(op) // its Message too: one allocation for both
			err = wire.ParseInto(&o.msg, bytes.Clone(raw))
		}
		if err != nil && !isProtocolError(err) {
			ss.abort() // the client is gone: free a write that holds mu
		}
		ss.mu.Lock()
		if ss.ended {
			ss.mu.Unlock()
			return
		}
		if err != nil {
			ss.onClientEnd(err)
			ss.settle()
			ss.mu.Unlock()
			return
		}
		wait := o.msg.Op == wire.TagExtendedRequest && o.msg.ExtOID == wire.OIDStartTLS
		ss.onClient(o)
		ss.settle()
		ended := ss.ended
		ss.mu.Unlock()
		if ended {
			return
		}
		if wait {
			select {
			case c := <-ss.resume:
				if c != nil {
					ss.rd.Reset(clientReader{c, ss})
				}
			case <-ss.done:
				return
			}
		}
	}
}

// isProtocolError reports whether err is a *wire.ProtocolError. Its own
// function, so that the error value errors.As fills is allocated only on
// an error path.
func isProtocolError(err error) bool {
	var pe *wire.ProtocolError
	return errors.As(err, &pe)
}

func (ss *session) onClientEnd(err error) {
	ss.ended = true
	var pe *wire.ProtocolError
	var ne net.Error
	switch {
	case errors.As(err, &pe):
		ss.srv.log.Warn("protocol error from client", ss.who("err", err)...)
		ss.write(wire.NoticeOfDisconnection(wire.ResultProtocolError, pe.Error()))
	case errors.As(err, &ne) && ne.Timeout():
		why := fmt.Sprintf("a PDU not completed within %v", orDefault(ss.srv.cfg.PDUTimeout))
		ss.srv.log.Warn("protocol error from client", ss.who("err", why)...)
		ss.write(wire.NoticeOfDisconnection(wire.ResultProtocolError, why))
	}
}

// onClient handles o, a request just read: o.msg holds it.
func (ss *session) onClient(o *op) {
	ss.seq++
	m := &o.msg
	o.m, o.name, o.start, o.seq = m, wire.OpName(m.Op), ss.srv.now(), ss.seq
	if m.Op == wire.TagSearchRequest {
		if p, ok := wire.FindPaged(m.Raw); ok {
			o.paged = new(p) // not &p: that would allocate for every search
		}
		o.follows = followsOf(m.Raw)
	}
	if o.name == "" {
		o.name = fmt.Sprintf("op-0x%02x", m.Op)
	}
	switch {
	case m.ID == 0:
		// Reserved for unsolicited notifications (RFC 4511 §4.1.1.1): a
		// server answers such a request with id 0 too, which reads as
		// its notice of disconnection.
		ss.protocolError("message id 0 in a request")
		return
	case m.Op == wire.TagUnbindRequest:
		ss.unbind(o)
		return
	case m.Op == wire.TagAbandonRequest:
		ss.abandon(o)
		return
	case ss.pending[m.ID] != nil:
		// RFC 4511 §4.1.1.1: an id must differ from that of every request
		// in progress. Answers could not be told apart (nor told to the
		// server: both operations would be in flight under one id), and
		// such requests would escape max_pending; slapd answers both, and
		// closes the connection once they exceed its own cap.
		ss.protocolError(fmt.Sprintf("message id %d is in use by a request in progress", m.ID))
		return
	case len(ss.pending) >= ss.maxPending():
		ss.reply(o, wire.ResultBusy, fmt.Sprintf("more than %d operations outstanding on this connection", ss.maxPending()))
		return
	case m.Op == wire.TagExtendedRequest && m.ExtOID == wire.OIDStartTLS:
		ss.startTLS(o)
		return
	case ss.srv.tlsCfg != nil && !ss.isTLS:
		ss.reply(o, 13, "confidentiality required: use LDAPS or StartTLS") // confidentialityRequired
		return
	case wire.ResponseTag(m.Op) == 0:
		ss.protocolError("not an LDAP request: " + o.name)
		return
	case m.Op == wire.TagBindRequest:
		ss.bind(o)
		return
	}
	ss.route(o)
}

// protocolError ends the session on a request no server may see, with a
// Notice of Disconnection.
func (ss *session) protocolError(why string) {
	ss.srv.log.Warn("protocol error from client", ss.who("err", why)...)
	ss.write(wire.NoticeOfDisconnection(wire.ResultProtocolError, why))
	ss.ended = true
}

// maxPending is the cap on the client's outstanding operations for the
// identity in force.
func (ss *session) maxPending() int {
	if ss.cred != nil {
		return ss.srv.cfg.MaxPendingAuth
	}
	return ss.srv.cfg.MaxPending
}

// bind re-selects the targets for the new identity, except for the next
// step of a multi-step SASL exchange, which stays on its backend.
func (ss *session) bind(o *op) {
	if !o.m.BindSimple && strings.EqualFold(o.m.SASLMech, "EXTERNAL") {
		// The server would judge the core's connection, not the
		// client's certificate or socket: at best it refuses, at worst
		// (a client certificate of the core's own towards ssl:1
		// servers) every client would wear the core's identity.
		ss.reply(o, wire.ResultAuthMethodNotSupported, "SASL EXTERNAL does not work through the LDAP core: the directory sees the core's connection, "+
			"not the client's certificate; use a simple bind or SASL PLAIN over TLS")
		return
	}
	if ss.sasl != nil && !o.m.BindSimple && !ss.sasl.closed {
		ss.send(o, ss.sasl)
		return
	}
	ss.sasl = nil
	sel, err := ss.srv.router.SelectUser(&dlp.Ctx{User: dlp.NormalizeDN(o.m.BindName), Op: o.name})
	if err != nil {
		ss.reply(o, wire.ResultUnavailable, err.Error())
		return
	}
	if ss.lbRule = balanceRule(sel.Rule); ss.lbRule != nil {
		ss.selected, ss.primary, ss.cands, ss.ring = true, nil, nil, nil
		ss.balanced(o, ss.lbRule)
		return
	}
	ss.selected, ss.primary, ss.cands, ss.ring = true, nil, sel.Candidates, ss.ringOf(sel)
	b, diag := ss.userTarget(false, "")
	if b == nil {
		ss.unserved(o, sel.Rule, diag)
		return
	}
	ss.send(o, b)
}

// route sends a non-bind operation to its OperationRouting target or the
// connection's user target.
func (ss *session) route(o *op) {
	if !ss.selected {
		sel, err := ss.srv.router.SelectUser(&dlp.Ctx{User: "", Op: o.name, BaseObject: o.m.BaseObject})
		if err != nil {
			ss.reply(o, wire.ResultUnavailable, err.Error())
			return
		}
		ss.selected, ss.cands, ss.ring, ss.lbRule = true, sel.Candidates, ss.ringOf(sel), balanceRule(sel.Rule)
	}
	if osel, ok := ss.srv.router.SelectOperation(&dlp.Ctx{User: ss.norm, Op: o.name, BaseObject: o.m.BaseObject}); ok {
		if balanceRule(osel.Rule) != nil {
			ss.balanced(o, osel.Rule)
			return
		}
		o.rule, o.ring = osel.Rule, ss.ringOf(osel)
		b, rest, diag := ss.attach(osel.Candidates, o.ring, true)
		if b == nil {
			ss.unserved(o, osel.Rule, diag)
			return
		}
		o.cands = rest
		ss.send(o, b)
		return
	}
	if ss.lbRule != nil && ss.primary == nil { // primary: keepconn moved the connection to a rule's server
		ss.balanced(o, ss.lbRule)
		return
	}
	b, diag := ss.userTarget(true, o.name)
	if b == nil {
		ss.unserved(o, nil, diag)
		return
	}
	ss.send(o, b)
}

// unserved answers o when no server could take it: unavailable (52), or
// busy (51) when the last walk stopped because this origin ran out of
// local resources (ss.starved) — a retry soon may succeed.
func (ss *session) unserved(o *op, r *dlp.Rule, diag string) {
	code := wire.ResultUnavailable
	if ss.starved {
		code, ss.starved = wire.ResultBusy, false
	}
	ss.reply(o, code, ss.noServer(o, r, diag))
}

func (ss *session) noServer(o *op, r *dlp.Rule, diag string) string {
	who := ss.user
	if o.m.Op == wire.TagBindRequest {
		who = o.m.BindName
	}
	if who == "" {
		who = "anonymous"
	}
	msg := "no LDAP server available for " + who
	if r != nil {
		msg += " (rule " + r.Name + ")"
	}
	if diag != "" {
		msg += ": " + diag
	}
	return msg
}

func (ss *session) unbind(o *op) {
	var targets []string
	for _, b := range ss.conns {
		if !b.broken.Load() {
			b.conn.Write(o.m.Raw)
			targets = append(targets, b.name)
		}
	}
	ss.log(o, strings.Join(targets, ","), "none")
	ss.ended = true
}

func (ss *session) abandon(o *op) {
	target := ""
	if t := ss.pending[o.m.AbandonID]; t != nil && t.be != nil && !t.be.closed {
		if t.sent { // a held one was never sent: the abandon could only hit the core's own search
			t.be.conn.Write(o.m.Raw)
		}
		target = t.be.name
		delete(ss.pending, o.m.AbandonID)
		ss.track(t, nil)
	}
	ss.log(o, target, "none")
}

// reply answers o from the core itself. A bind it answers with an error
// leaves the connection anonymous, as a server's would.
func (ss *session) reply(o *op, code int, diag string) {
	if o.m.Op == wire.TagBindRequest && code != wire.ResultSuccess && ss.cred != nil {
		ss.anonymous()
	}
	var raw []byte
	if o.m.Op == wire.TagExtendedRequest {
		raw = wire.ExtendedResult(o.m.ID, code, diag, "")
	} else {
		raw = wire.Result(o.m.ID, wire.ResponseTag(o.m.Op), code, "", diag)
	}
	ss.finish(o, code, raw)
}

func (ss *session) finish(o *op, code int, raw []byte) {
	ss.track(o, nil)
	if ss.pending[o.m.ID] == o {
		delete(ss.pending, o.m.ID)
	}
	ss.write(raw)
	target := ""
	if o.be != nil {
		target = o.be.name
	}
	ss.log(o, target, wire.ResultName(code))
}

func (ss *session) write(raw []byte) {
	if _, err := ss.out.Write(raw); err != nil {
		ss.writeFailed(err)
	}
}

// writeFailed ends the session after a failed write to the client: it
// closed, read nothing for WriteTimeout, took nothing for a StallWindow
// while more than MaxQueued behind, or fell MaxHeld behind (its
// operations on the servers are abandoned when settle closes their
// connections). What is still queued for it is dropped.
func (ss *session) writeFailed(err error) {
	if errors.Is(err, errOutClosed) {
		return // the session ended already
	}
	var held errHeld
	var ne net.Error
	switch {
	case ss.ended:
	case errors.As(err, &held):
		ss.srv.log.Warn("client too far behind: disconnected", ss.who("err", err, "pending", len(ss.pending))...)
	case errors.Is(err, errStalled) || errors.As(err, &ne) && ne.Timeout():
		ss.srv.log.Warn("client stopped reading: disconnected", ss.who("err", err, "pending", len(ss.pending))...)
	}
	ss.ended, ss.cut = true, true
}

func (ss *session) log(o *op, target, result string) {
	server := target
	if server == "" {
		server = "none"
	}
	ss.opsCounter(server, o.name, result).Inc()
	if !ss.srv.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	kv := ss.who("op", o.name, "msgid", o.m.ID, "target", target, "result", result, "duration", ss.srv.now().Sub(o.start))
	if o.m.Op == wire.TagBindRequest {
		// user is the identity after the bind; dn is the one it tried.
		kv = append(kv, "dn", o.m.BindName)
	}
	ss.srv.log.Info("ldap op", kv...)
}

// opsCounter is edgefleet_core_operations_total for the labels, from the
// session's few last used: a session repeats the same few (one server,
// an operation or two, success), and the vector's own lookup hashes the
// three labels and takes a lock for every operation.
func (ss *session) opsCounter(server, op, result string) prometheus.Counter {
	for i := range ss.counters {
		if c := &ss.counters[i]; c.c != nil && c.server == server && c.op == op && c.result == result {
			return c.c
		}
	}
	c := ss.srv.m.ops.WithLabelValues(server, op, result)
	copy(ss.counters[1:], ss.counters[:len(ss.counters)-1])
	ss.counters[0] = opsCounter{server, op, result, c}
	return c
}

// opsCounter is one cached edgefleet_core_operations_total series.
type opsCounter struct {
	server, op, result string
	c                  prometheus.Counter
}

// who prefixes log arguments with the connection's identity fields.
func (ss *session) who(kv ...any) []any {
	p := ss.peer
	return append([]any{"id", p.ID, "claimed", p.Claimed, "measured", p.Measured, "edge", p.Edge,
		"agent", ss.agent, "user", ss.user}, kv...)
}

// abort closes every backend connection without taking mu. The session
// is ending; settle does the rest under mu.
func (ss *session) abort() {
	ss.linesMu.Lock()
	defer ss.linesMu.Unlock()
	ss.aborted = true
	for c := range ss.lines {
		c.Close()
	}
}

func (ss *session) isAborted() bool {
	ss.linesMu.Lock()
	defer ss.linesMu.Unlock()
	return ss.aborted
}

// addLine registers a backend connection for abort; false (and the
// connection closed) when the session is already aborting.
func (ss *session) addLine(c net.Conn) bool {
	ss.linesMu.Lock()
	defer ss.linesMu.Unlock()
	if ss.aborted {
		c.Close()
		return false
	}
	ss.lines[c] = struct{}{}
	return true
}

func (ss *session) dropLine(c net.Conn) {
	ss.linesMu.Lock()
	defer ss.linesMu.Unlock()
	delete(ss.lines, c)
}

// wake lets the client reader go on (with c as its new stream after
// StartTLS). It never blocks: the reader waits for one wake at a time.
func (ss *session) wake(c net.Conn) {
	select {
	case ss.resume <- c:
	default:
		ss.srv.log.Error("[unexpected] client reader woken twice", ss.who()...)
	}
}
