package core

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
	"github.com/edgefleet/edgefleet/origin/ldap/wire"
)

// A session is one client connection. All its state is owned by the loop
// in run; the client reader and one reader per backend connection only
// frame PDUs and post them as events, so failover decisions never race
// with new operations.
type session struct {
	srv    *Server
	peer   Peer
	agent  string
	client net.Conn
	w      *bufio.Writer
	rd     *wire.Reader
	isTLS  bool
	max    atomic.Int64

	events chan event
	done   chan struct{}
	resume chan net.Conn // wakes the client reader after StartTLS or a first bind
	ended  bool

	// The identity in force: the bind DN as sent, its normalised form for
	// rules, and the bind request that established it (re-sent with the
	// core's own message id on a new backend connection).
	user, norm string
	cred       []byte
	credOK     bool   // cred can be replayed (simple or one-step SASL bind)
	gen        uint64 // identity generation; backend.gen records which one a connection carries
	sasl       *backend

	selected bool
	primary  *backend // the user target
	cands    []string // the user target's server first, then the failover order

	conns   []*backend
	pending map[int32]*op
	seq     uint64
}

type op struct {
	m      *wire.Message
	name   string
	start  time.Time
	seq    uint64
	be     *backend
	sent   bool
	resume bool      // a bind before the first success: the reader waits for its result
	rule   *dlp.Rule // the OperationRouting rule that routed it; nil for the user target
	cands  []string  // with rule: the server used first, then the failover order
	// Search entries and references already forwarded, and those seen
	// from the current backend: a replayed search skips what the client
	// already has.
	forwarded, seen int
}

type backend struct {
	name   string
	conn   net.Conn
	rd     *wire.Reader
	gen    uint64 // identity bound on this connection; 0: anonymous
	broken atomic.Bool
	closed bool
}

type evKind int

const (
	evClient evKind = iota
	evClientEnd
	evBackend
	evBackendEnd
)

type event struct {
	kind evKind
	msg  *wire.Message
	raw  []byte
	be   *backend
	err  error
}

// rebindID is the message id of the core's own re-binds. They are sent on
// a fresh backend connection before any client operation, so the answer
// cannot be confused with one of the client's.
const rebindID = 1<<31 - 1

func newSession(srv *Server, c net.Conn, p Peer) *session {
	ss := &session{srv: srv, peer: p, client: c, events: make(chan event, 256), done: make(chan struct{}),
		resume: make(chan net.Conn, 1), pending: map[int32]*op{}, gen: 1}
	ss.max.Store(PreBindMaxPDU)
	return ss
}

func (ss *session) run() {
	defer ss.end()
	if !ss.accept() {
		return
	}
	ss.w = bufio.NewWriterSize(ss.client, 16<<10)
	go ss.readClient()
	for !ss.ended {
		ev := <-ss.events
		switch ev.kind {
		case evClient:
			ss.onClient(ev.msg)
		case evClientEnd:
			ss.onClientEnd(ev.err)
		case evBackend:
			ss.onBackend(ev.be, ev.raw)
		case evBackendEnd:
			ss.onBackendEnd(ev.be, ev.err)
		}
		if len(ss.events) == 0 && !ss.ended {
			if err := ss.w.Flush(); err != nil {
				ss.ended = true
			}
		}
	}
}

// accept tells LDAPS from plain LDAP by the first byte (a TLS record is
// 0x16, an LDAPMessage 0x30) and completes the TLS handshake.
func (ss *session) accept() bool {
	if ss.srv.tlsCfg == nil {
		ss.rd = wire.NewReader(ss.client)
		return true
	}
	var first [1]byte
	if _, err := io.ReadFull(ss.client, first[:]); err != nil {
		return false // a connection that closes without a byte: a health check
	}
	if first[0] != 0x16 {
		ss.rd = wire.NewReader(io.MultiReader(bytes.NewReader(first[:]), ss.client))
		return true
	}
	tc := tls.Server(&prefixConn{Conn: ss.client, pre: first[:]}, ss.srv.tlsCfg)
	if !ss.handshake(tc) {
		return false
	}
	ss.rd = wire.NewReader(tc)
	return true
}

func (ss *session) handshake(tc *tls.Conn) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		ss.srv.log.Warn("tls handshake", "id", ss.peer.ID, "claimed", ss.peer.Claimed, "measured", ss.peer.Measured,
			"edge", ss.peer.Edge, "err", err)
		return false
	}
	ss.client, ss.isTLS = tc, true
	ss.agent = ss.srv.agentOf(tc.ConnectionState())
	return true
}

func (ss *session) end() {
	close(ss.done)
	if ss.w != nil {
		ss.w.Flush()
	}
	ss.client.Close()
	for _, b := range slices.Clone(ss.conns) {
		ss.closeBackend(b)
	}
}

func (ss *session) post(ev event) bool {
	select {
	case ss.events <- ev:
		return true
	case <-ss.done:
		return false
	}
}

// readClient frames the client's PDUs. After a StartTLS request, and after
// a bind while the pre-bind size cap applies, it waits for the loop: the
// stream may change under it, or its cap may grow.
func (ss *session) readClient() {
	for {
		ss.rd.SetMax(int(ss.max.Load()))
		raw, err := ss.rd.Next()
		if err != nil {
			ss.post(event{kind: evClientEnd, err: err})
			return
		}
		m, err := wire.Parse(bytes.Clone(raw))
		if err != nil {
			ss.post(event{kind: evClientEnd, err: err})
			return
		}
		wait := (m.Op == wire.TagExtendedRequest && m.ExtOID == wire.OIDStartTLS) ||
			(m.Op == wire.TagBindRequest && ss.max.Load() < int64(ss.srv.cfg.MaxPDU))
		if !ss.post(event{kind: evClient, msg: m}) || m.Op == wire.TagUnbindRequest {
			return
		}
		if wait {
			select {
			case c := <-ss.resume:
				if c != nil {
					ss.rd.Reset(c)
				}
			case <-ss.done:
				return
			}
		}
	}
}

func (ss *session) onClientEnd(err error) {
	ss.ended = true
	var pe *wire.ProtocolError
	if errors.As(err, &pe) {
		ss.srv.log.Warn("protocol error from client", ss.who("err", err)...)
		ss.w.Write(wire.NoticeOfDisconnection(wire.ResultProtocolError, pe.Error()))
	}
}

func (ss *session) onClient(m *wire.Message) {
	ss.seq++
	o := &op{m: m, name: wire.OpName(m.Op), start: ss.srv.now(), seq: ss.seq}
	if o.name == "" {
		o.name = fmt.Sprintf("op-0x%02x", m.Op)
	}
	switch {
	case m.Op == wire.TagUnbindRequest:
		ss.unbind(o)
		return
	case m.Op == wire.TagAbandonRequest:
		ss.abandon(o)
		return
	case m.Op == wire.TagExtendedRequest && m.ExtOID == wire.OIDStartTLS:
		ss.startTLS(o)
		return
	case ss.srv.tlsCfg != nil && !ss.isTLS:
		if m.Op == wire.TagBindRequest && ss.max.Load() < int64(ss.srv.cfg.MaxPDU) {
			o.resume = true
		}
		ss.reply(o, 13, "confidentiality required: use LDAPS or StartTLS") // confidentialityRequired
		return
	case wire.ResponseTag(m.Op) == 0:
		ss.srv.log.Warn("protocol error from client", ss.who("err", "not an LDAP request: "+o.name)...)
		ss.write(wire.NoticeOfDisconnection(wire.ResultProtocolError, "not an LDAP request"))
		ss.ended = true
		return
	case m.Op == wire.TagBindRequest:
		ss.bind(o)
		return
	}
	ss.route(o)
}

// bind re-selects the targets for the new identity, except for the next
// step of a multi-step SASL exchange, which stays on its backend.
func (ss *session) bind(o *op) {
	o.resume = ss.max.Load() < int64(ss.srv.cfg.MaxPDU)
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
	ss.selected, ss.primary, ss.cands = true, nil, sel.Candidates
	b, diag := ss.userTarget(false, "")
	if b == nil {
		ss.reply(o, wire.ResultUnavailable, ss.noServer(o, sel.Rule, diag))
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
		ss.selected, ss.cands = true, sel.Candidates
	}
	if osel, ok := ss.srv.router.SelectOperation(&dlp.Ctx{User: ss.norm, Op: o.name, BaseObject: o.m.BaseObject}); ok {
		o.rule = osel.Rule
		b, rest, diag := ss.attach(osel.Candidates, true)
		if b == nil {
			ss.reply(o, wire.ResultUnavailable, ss.noServer(o, osel.Rule, diag))
			return
		}
		o.cands = rest
		ss.send(o, b)
		return
	}
	b, diag := ss.userTarget(true, o.name)
	if b == nil {
		ss.reply(o, wire.ResultUnavailable, ss.noServer(o, nil, diag))
		return
	}
	ss.send(o, b)
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

// userTarget is the connection's user-target backend, connecting (and
// failing over) when it has none or when it carries an older identity.
//
// A new operation (reselect names it) on a connection whose servers all
// failed selects again for the identity in force; a replay does not, so
// that failover: 0 still returns the first failure.
func (ss *session) userTarget(ident bool, reselect string) (*backend, string) {
	if b := ss.primary; b != nil && b.broken.Load() {
		ss.lost(b)
	}
	if b := ss.primary; b != nil && (!ident || ss.fits(b)) {
		return b, ""
	}
	if len(ss.cands) == 0 && reselect != "" {
		sel, err := ss.srv.router.SelectUser(&dlp.Ctx{User: ss.norm, Op: reselect})
		if err != nil {
			return nil, err.Error()
		}
		ss.cands = sel.Candidates
	}
	if len(ss.cands) == 0 {
		return nil, "every server of the selection failed"
	}
	b, rest, diag := ss.attach(ss.cands, ident)
	if b == nil {
		ss.cands = nil
		return nil, diag
	}
	ss.primary, ss.cands = b, rest
	return b, ""
}

// lost handles a connection whose reader saw its end before the loop
// did: with operations in flight it is a failure; idle, the server only
// closed it (idle timeout, restart) and the next attempt reconnects.
func (ss *session) lost(b *backend) {
	if ss.busy(b) || ss.sasl == b {
		ss.backendFailed(b, errors.New("connection lost"))
		return
	}
	ss.closeBackend(b)
}

// fits reports whether b carries the identity in force.
func (ss *session) fits(b *backend) bool {
	return b.gen == ss.gen || (b.gen == 0 && ss.cred == nil)
}

// attach returns a backend for the first usable server of cands: a
// connection this client already has, or a new one. Servers are contacted
// one after another with ConnectTimeout; OFFLINE ones are skipped. It also
// returns cands from the chosen server on.
func (ss *session) attach(cands []string, ident bool) (*backend, []string, string) {
	var errs []string
	for i, name := range cands {
		for _, b := range ss.conns {
			if b.name == name && !b.closed && !b.broken.Load() && (!ident || ss.fits(b)) {
				return b, cands[i:], ""
			}
		}
		if ss.srv.health.Offline(name) {
			errs = append(errs, name+" is OFFLINE")
			continue
		}
		b, err := ss.dial(name, ident)
		if err != nil {
			errs = append(errs, name+": "+err.Error())
			continue
		}
		return b, cands[i:], ""
	}
	return nil, nil, strings.Join(errs, "; ")
}

// errIdentity is a re-bind the backend refused: not an outage.
var errIdentity = errors.New("re-bind")

func (ss *session) dial(name string, ident bool) (*backend, error) {
	srv := ss.srv
	sv := srv.file.Servers[name]
	ctx, cancel := context.WithTimeout(context.Background(), srv.file.Defaults.ConnectTimeout)
	defer cancel()
	conn, err := srv.dialTCP(ctx, sv.Addr())
	if err == nil && sv.SSL {
		tc := tls.Client(conn, srv.backendTLS(sv.Host))
		if err = tc.HandshakeContext(ctx); err != nil {
			conn.Close()
		}
		conn = tc
	}
	if err != nil {
		srv.fail(name, err)
		return nil, err
	}
	srv.succeed(name)
	b := &backend{name: name, conn: conn, rd: wire.NewReader(conn)}
	b.rd.SetMax(srv.cfg.MaxPDU)
	if ident && ss.cred != nil {
		if !ss.credOK {
			conn.Close()
			return nil, fmt.Errorf("%w: the SASL identity of %q cannot be re-established on another server", errIdentity, ss.user)
		}
		code, err := ss.rebind(b)
		if err != nil {
			conn.Close()
			srv.fail(name, err)
			return nil, err
		}
		if code != wire.ResultSuccess {
			conn.Close()
			return nil, fmt.Errorf("%w as %q refused: %s", errIdentity, ss.user, wire.ResultName(code))
		}
		b.gen = ss.gen
	}
	ss.conns = append(ss.conns, b)
	go ss.readBackend(b)
	return b, nil
}

// rebind binds a fresh backend connection with the saved credentials and
// swallows the answer.
func (ss *session) rebind(b *backend) (int, error) {
	req, err := wire.WithID(ss.cred, rebindID)
	if err != nil {
		return 0, err
	}
	if _, err := b.conn.Write(req); err != nil {
		return 0, err
	}
	for {
		raw, err := b.rd.Next()
		if err != nil {
			return 0, err
		}
		m, err := wire.Parse(raw)
		if err != nil {
			return 0, err
		}
		if m.ID == 0 {
			return 0, errors.New("notice of disconnection during re-bind")
		}
		if m.ID == rebindID && m.Op == wire.TagBindResponse {
			return m.ResultCode, nil
		}
	}
}

func (ss *session) readBackend(b *backend) {
	for {
		raw, err := b.rd.Next()
		if err != nil {
			b.broken.Store(true)
			ss.post(event{kind: evBackendEnd, be: b, err: err})
			return
		}
		if !ss.post(event{kind: evBackend, be: b, raw: bytes.Clone(raw)}) {
			return
		}
	}
}

// send writes o to b. A write that fails was not (completely) sent: the
// failure is handled like any other, and o fails over like a read.
func (ss *session) send(o *op, b *backend) {
	if b.broken.Load() {
		ss.lost(b)
		ss.reroute(o)
		return
	}
	o.be, o.sent, o.seen = b, false, 0
	ss.pending[o.m.ID] = o
	if _, err := b.conn.Write(o.m.Raw); err != nil {
		ss.backendFailed(b, err)
		return
	}
	o.sent = true
}

// reroute finds another connection for an operation that was not sent.
func (ss *session) reroute(o *op) {
	ident := o.m.Op != wire.TagBindRequest
	var b *backend
	var diag string
	if o.rule != nil {
		var rest []string
		if b, rest, diag = ss.attach(o.cands, ident); b != nil {
			o.cands = rest
		}
	} else {
		b, diag = ss.userTarget(ident, "")
	}
	if b == nil {
		ss.reply(o, wire.ResultUnavailable, ss.noServer(o, o.rule, diag))
		return
	}
	ss.send(o, b)
}

func (ss *session) onBackend(b *backend, raw []byte) {
	if b.closed {
		return
	}
	id, tag, ok := header(raw)
	if !ok {
		ss.backendFailed(b, errors.New("malformed PDU from server"))
		return
	}
	if id == 0 { // unsolicited notification: the server is going away
		ss.backendFailed(b, errors.New("notice of disconnection from server"))
		return
	}
	o := ss.pending[id]
	if o == nil || o.be != b {
		ss.write(raw) // an abandoned operation's late answer: the id is the client's own
		return
	}
	if !wire.IsFinal(tag) {
		if tag == wire.TagSearchResultEntry || tag == wire.TagSearchResultReference {
			o.seen++
			if o.seen <= o.forwarded {
				return // the client has it from the failed server
			}
			o.forwarded++
		}
		ss.write(raw)
		return
	}
	m, err := wire.Parse(raw)
	if err != nil {
		ss.backendFailed(b, fmt.Errorf("malformed response: %w", err))
		return
	}
	if o.m.Op == wire.TagBindRequest {
		ss.bound(o, b, m.ResultCode)
	}
	if o.rule != nil && o.rule.KeepConn && m.ResultCode == wire.ResultSuccess && b != ss.primary {
		ss.primary, ss.cands = b, o.cands
	}
	ss.finish(o, m.ResultCode, raw)
}

// bound records the identity a bind established on b.
func (ss *session) bound(o *op, b *backend, code int) {
	switch code {
	case wire.ResultSuccess:
		ss.cred, ss.credOK = o.m.Raw, ss.sasl == nil
		ss.user, ss.norm = o.m.BindName, dlp.NormalizeDN(o.m.BindName)
		ss.gen++
		b.gen, ss.sasl = ss.gen, nil
		ss.max.Store(int64(ss.srv.cfg.MaxPDU))
	case wire.ResultSaslBindInProgress:
		ss.sasl = b
		return
	default: // a failed bind leaves the connection anonymous (RFC 4511 §4.2.1)
		ss.anonymous()
		b.gen = 0
	}
	// Idle connections with the old identity are of no further use.
	for _, c := range slices.Clone(ss.conns) {
		if c != b && !c.closed && !ss.fits(c) && !ss.busy(c) {
			ss.closeBackend(c)
		}
	}
}

// anonymous makes the connection anonymous after a failed bind.
func (ss *session) anonymous() {
	ss.cred, ss.user, ss.norm, ss.sasl = nil, "", "", nil
	ss.gen++
}

func (ss *session) busy(b *backend) bool {
	for _, o := range ss.pending {
		if o.be == b {
			return true
		}
	}
	return false
}

func (ss *session) onBackendEnd(b *backend, err error) {
	if b.closed {
		return
	}
	if ss.busy(b) || ss.sasl == b {
		ss.backendFailed(b, err)
		return
	}
	ss.closeBackend(b) // idle: see lost
}

// backendFailed handles a connect-level or I/O failure of b: b is OFFLINE
// for everyone, and its operations in flight are replayed elsewhere —
// except writes already sent, whose outcome is unknown.
func (ss *session) backendFailed(b *backend, err error) {
	if b.closed {
		return
	}
	ss.closeBackend(b)
	ss.srv.fail(b.name, err)
	if ss.primary == b {
		ss.primary = nil
		if len(ss.cands) > 0 && ss.cands[0] == b.name {
			ss.cands = ss.cands[1:]
		}
	}
	sasl := ss.sasl == b
	if sasl {
		ss.sasl = nil
	}
	var ops []*op
	for _, o := range ss.pending {
		if o.be == b {
			ops = append(ops, o)
		}
	}
	slices.SortFunc(ops, func(a, c *op) int { return int(a.seq - c.seq) })
	for _, o := range ops {
		switch {
		case ss.ended:
			delete(ss.pending, o.m.ID)
		case o.sent && !wire.IsRead(o.m):
			ss.reply(o, wire.ResultUnavailable, fmt.Sprintf(
				"%s failed after the %s request was sent: its outcome is unknown; check the directory before retrying", b.name, o.name))
		case o.m.Op == wire.TagBindRequest && !o.m.BindSimple && sasl:
			ss.reply(o, wire.ResultUnavailable, b.name+" failed during a multi-step SASL bind; start the bind again")
		default:
			ss.replay(o, b)
		}
	}
}

// replay sends o again on the next server.
func (ss *session) replay(o *op, failed *backend) {
	var b *backend
	var diag string
	if o.rule != nil {
		cands := o.cands
		if len(cands) > 0 && cands[0] == failed.name {
			cands = cands[1:]
		}
		var rest []string
		b, rest, diag = ss.attach(cands, o.m.Op != wire.TagBindRequest)
		o.cands = rest
	} else {
		b, diag = ss.userTarget(o.m.Op != wire.TagBindRequest, "")
	}
	if b == nil {
		ss.reply(o, wire.ResultUnavailable, ss.noServer(o, o.rule, failed.name+" failed; "+diag))
		return
	}
	ss.srv.log.Info("failover", ss.who("op", o.name, "from", failed.name, "target", b.name)...)
	ss.send(o, b)
}

func (ss *session) closeBackend(b *backend) {
	if b.closed {
		return
	}
	b.closed = true
	b.conn.Close()
	ss.conns = slices.DeleteFunc(ss.conns, func(c *backend) bool { return c == b })
	if ss.primary == b {
		ss.primary = nil
	}
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
		t.be.conn.Write(o.m.Raw)
		target = t.be.name
		delete(ss.pending, o.m.AbandonID)
	}
	ss.log(o, target, "none")
}

func (ss *session) startTLS(o *op) {
	refuse := func(code int, diag string) {
		ss.reply(o, code, diag)
		ss.resume <- nil
	}
	switch {
	case ss.srv.tlsCfg == nil || !ss.srv.cfg.StartTLS:
		refuse(wire.ResultProtocolError, "StartTLS is not offered")
		return
	case ss.isTLS:
		refuse(wire.ResultOperationsError, "TLS is already established")
		return
	case len(ss.pending) > 0 || ss.rd.Buffered() > 0:
		refuse(wire.ResultOperationsError, "StartTLS with operations outstanding")
		return
	}
	ss.w.Write(wire.ExtendedResult(o.m.ID, wire.ResultSuccess, "", wire.OIDStartTLS))
	if err := ss.w.Flush(); err != nil {
		ss.ended = true
		return
	}
	if !ss.handshake(tls.Server(ss.client, ss.srv.tlsCfg)) {
		ss.ended = true
		return
	}
	ss.w.Reset(ss.client)
	ss.log(o, "", wire.ResultName(wire.ResultSuccess))
	ss.resume <- ss.client
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
	if ss.pending[o.m.ID] == o {
		delete(ss.pending, o.m.ID)
	}
	ss.write(raw)
	target := ""
	if o.be != nil {
		target = o.be.name
	}
	ss.log(o, target, wire.ResultName(code))
	if o.resume {
		o.resume = false
		ss.resume <- nil
	}
}

func (ss *session) write(raw []byte) {
	if _, err := ss.w.Write(raw); err != nil {
		ss.ended = true
	}
}

func (ss *session) log(o *op, target, result string) {
	server := target
	if server == "" {
		server = "none"
	}
	ss.srv.m.ops.WithLabelValues(server, o.name, result).Inc()
	ss.srv.log.Info("ldap op", ss.who("op", o.name, "msgid", o.m.ID, "target", target, "result", result,
		"duration", ss.srv.now().Sub(o.start))...)
}

// who prefixes log arguments with the connection's identity fields.
func (ss *session) who(kv ...any) []any {
	p := ss.peer
	return append([]any{"id", p.ID, "claimed", p.Claimed, "measured", p.Measured, "edge", p.Edge,
		"agent", ss.agent, "user", ss.user}, kv...)
}

// header reads the message id and protocolOp tag of a PDU without a full
// parse (the hot path of search entries).
func header(raw []byte) (id int32, tag byte, ok bool) {
	if len(raw) < 2 || raw[0] != 0x30 {
		return 0, 0, false
	}
	i := 2
	if raw[1]&0x80 != 0 {
		i += int(raw[1] & 0x7f)
	}
	if i+2 > len(raw) || raw[i] != 0x02 {
		return 0, 0, false
	}
	n := int(raw[i+1])
	i += 2
	if n < 1 || n > 5 || i+n >= len(raw) || raw[i]&0x80 != 0 {
		return 0, 0, false
	}
	var v int64
	for _, c := range raw[i : i+n] {
		v = v<<8 | int64(c)
	}
	if v > 1<<31-1 {
		return 0, 0, false
	}
	return int32(v), raw[i+n], true
}

// prefixConn is a connection whose first bytes were already read.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

var _ net.Conn = (*prefixConn)(nil)
