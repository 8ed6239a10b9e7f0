package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edgefleet/edgefleet/internal/errclass"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
)

// backend is one connection from a session to an LdapServer, read by its
// own goroutine (readBackend).
type backend struct {
	name   string
	conn   net.Conn
	rd     *wire.Reader
	gen    uint64 // identity bound on this connection; 0: anonymous
	broken atomic.Bool
	err    error // why the reader stopped; set before broken
	closed bool
	// firstBy is set while the answer to the connection's first request
	// is awaited, with a read deadline; probe while the core's own search
	// ahead of the first request is unanswered (firstAnswer). The reader
	// clears both.
	firstBy time.Time
	probe   bool
	probeAt time.Time // when the core's own search was sent
	// heard is what the core heard from the server (progress.go); mark
	// is its count when the first-answer bound was last set.
	heard *progress
	mark  uint64
	// held are the client's operations sent while the core's own search
	// is unanswered, and the bytes for each: they go out once it is
	// (release), so that no answer to a client operation can be taken
	// for the core's (both could use message id 2147483647). Guarded by
	// the session's mu, like holding.
	held    []heldOp
	holding bool
	// final is the last final response decoded (onBackend), reused;
	// guarded by the session's mu.
	final wire.Message
}

type heldOp struct {
	o   *op
	raw []byte
}

// MaxBackendPDU caps a PDU from a server. Servers are trusted and may
// return large entries; one beyond the cap fails the operations on that
// connection, not the server.
const MaxBackendPDU = 64 << 20

// rebindID is the message id of the core's own re-binds. They are sent on
// a fresh backend connection before any client operation, so the answer
// cannot be confused with one of the client's.
const rebindID = 1<<31 - 1

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
		ss.cands, ss.ring = sel.Candidates, ss.ringOf(sel)
	}
	if len(ss.cands) == 0 {
		return nil, "every server of the selection failed"
	}
	b, rest, diag := ss.attach(ss.cands, ss.ring, ident)
	if b == nil {
		ss.cands = nil
		return nil, diag
	}
	ss.primary, ss.cands = b, rest
	return b, ""
}

// lost handles a connection whose reader saw its end before the session
// handled it: with operations in flight it is a failure; idle, the server only
// closed it (idle timeout, restart) and the next attempt reconnects.
func (ss *session) lost(b *backend) {
	if ss.busy(b) || ss.sasl == b {
		ss.connEnded(b, b.err)
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
// returns the failover order from the chosen server on: ring rotated to
// start there, so that a later failover wraps around to servers before it
// (cands from the chosen server on without a ring).
//
// A dial that failed for lack of local resources (errclass.LocalResources)
// ends the walk and sets ss.starved: the client is answered busy.
func (ss *session) attach(cands, ring []string, ident bool) (*backend, []string, string) {
	ss.starved = false
	var errs []string
	for i, name := range cands {
		for _, b := range ss.conns {
			if b.name == name && !b.closed && !b.broken.Load() && (!ident || ss.fits(b)) {
				return b, rotate(ring, cands, i), ""
			}
		}
		if ss.srv.health.Offline(name) {
			errs = append(errs, name+" is OFFLINE")
			continue
		}
		b, err := ss.dial(name, ident)
		if errclass.LocalResources(err) { // the next server would fail the same way
			ss.starved = true
			return nil, nil, "this origin is out of local resources, retry later (no server was marked OFFLINE): " + name + ": " + err.Error()
		}
		if err != nil {
			errs = append(errs, name+": "+err.Error())
			continue
		}
		return b, rotate(ring, cands, i), ""
	}
	return nil, nil, strings.Join(errs, "; ")
}

// ringOf is the list a selection's failover walks, wrapping (seed 000:
// failover goes on until the request can be processed or every server
// failed): the rule's forwardto list, or the proxy's default list. Nil
// without failover, and for a balance(LB) rule.
func (ss *session) ringOf(sel *dlp.Selection) []string {
	switch {
	case sel.Rule == nil:
		return ss.srv.proxy.Default
	case sel.Rule.Failover:
		return sel.Rule.Forward
	}
	return nil
}

// rotate is ring rotated to start at cands[i]; cands[i:] when ring does not
// hold it. Servers OFFLINE now stay in: attach skips them when it walks.
func rotate(ring, cands []string, i int) []string {
	k := slices.Index(ring, cands[i])
	if k < 0 {
		return cands[i:]
	}
	return append(slices.Clone(ring[k:]), ring[:k]...)
}

// errIdentity is a re-bind the backend refused: not an outage.
var errIdentity = errors.New("re-bind")

func (ss *session) dial(name string, ident bool) (*backend, error) {
	if ss.isAborted() {
		return nil, errors.New("session ending") // not the server's failure
	}
	srv := ss.srv
	ctx, cancel := context.WithTimeout(context.Background(), srv.file.Defaults.ConnectTimeout)
	defer cancel()
	conn, err := srv.connect(ctx, name)
	if err != nil {
		srv.fail(name, err)
		return nil, err
	}
	srv.succeed(name)
	conn = newRawSock(conn)
	// Registered for abort at once: a re-bind may wait long (below).
	if !ss.addLine(conn) {
		return nil, errors.New("session ending")
	}
	drop := func() {
		ss.dropLine(conn)
		conn.Close()
	}
	b := &backend{name: name, conn: conn, rd: wire.NewReader(conn), heard: srv.heard.of(name)}
	b.rd.SetMax(max(srv.cfg.MaxPDU, MaxBackendPDU))
	if ident && ss.cred != nil {
		if !ss.credOK {
			drop()
			return nil, fmt.Errorf("%w: %s", errIdentity, ss.noReplay())
		}
		code, err := ss.rebind(b, ss.cred)
		if err != nil {
			drop()
			if !errors.Is(err, errIdentity) && !ss.isAborted() && srv.serverFailed(name, err) {
				srv.fail(name, err)
			}
			return nil, err
		}
		if code != wire.ResultSuccess {
			drop()
			return nil, fmt.Errorf("%w as %q refused: %s", errIdentity, ss.user, wire.ResultName(code))
		}
		b.gen = ss.gen
	} else if err := ss.firstAnswer(b); err != nil {
		drop()
		srv.fail(name, err)
		return nil, err
	}
	ss.conns = append(ss.conns, b)
	go ss.readBackend(b)
	return b, nil
}

// rebind binds a fresh backend connection with cred (the saved
// credentials) and swallows the answer. The server is first asked for the
// root DSE (probe), bounded like a first answer: a server that accepts
// connections but does not answer fails there, like one that does not
// accept, and failover goes on. The bind itself costs what the client's
// password costs (a hash may take seconds): it is bounded by
// rebindTimeout only so that a session cannot hang here, and a server
// that exceeds it is not marked OFFLINE — it answered the probe.
func (ss *session) rebind(b *backend, cred []byte) (int, error) {
	req, err := wire.WithID(cred, rebindID)
	if err != nil {
		return 0, err
	}
	if err := ss.probeNow(b); err != nil {
		return 0, err
	}
	b.conn.SetDeadline(time.Now().Add(rebindTimeout))
	defer b.conn.SetDeadline(time.Time{})
	if _, err := b.conn.Write(req); err != nil {
		return 0, err
	}
	b.heard.owe()
	defer b.heard.done()
	for {
		m, err := b.nextOwn()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, fmt.Errorf("%w as %q: no answer within %v (%s answered the core's search: not marked OFFLINE)", errIdentity, ss.user, rebindTimeout, b.name)
		}
		if err != nil {
			return 0, fmt.Errorf("re-bind: %w", err)
		}
		if m.ID == rebindID && m.Op == wire.TagBindResponse {
			return m.ResultCode, nil
		}
	}
}

// rebindTimeout bounds a re-bind once the server has answered the probe
// ahead of it: far above any password hash, so that only a server stuck
// inside the bind reaches it.
const rebindTimeout = 30 * time.Second

// probeNow sends the core's root DSE search on b and waits for its
// answer, bounded as a first answer is (firstAnswer, answered).
func (ss *session) probeNow(b *backend) error {
	limit := ss.srv.file.Defaults.ConnectTimeout
	b.probe, b.probeAt = true, time.Now()
	b.boundFirst(limit)
	if _, err := b.conn.Write(wire.RootDSESearch(rebindID)); err != nil {
		return err
	}
	for b.probe {
		raw, err := b.rd.Next()
		skip, err := b.answered(raw, err, limit)
		switch {
		case errors.Is(err, errStillBusy):
			continue
		case err != nil:
			return err
		case !skip:
			if _, err := b.own(raw); err != nil {
				return err
			}
		}
	}
	return nil
}

// nextOwn reads the next PDU of a connection no client operation has used
// yet (during a re-bind); a Notice of Disconnection is an error.
func (b *backend) nextOwn() (*wire.Message, error) {
	raw, err := b.rd.Next()
	if err != nil {
		return nil, err
	}
	b.heard.heard()
	return b.own(raw)
}

// own parses a PDU the server sent the core itself; a Notice of
// Disconnection is an error (errProtocolNotice when the server could not
// decode what it got).
func (b *backend) own(raw []byte) (*wire.Message, error) {
	m, err := wire.Parse(raw)
	if err != nil {
		return nil, err
	}
	if m.ID == 0 {
		if m.ResultCode == wire.ResultProtocolError {
			return nil, fmt.Errorf("%w: %s", errProtocolNotice, m.Diagnostic)
		}
		return nil, errors.New("notice of disconnection")
	}
	return m, nil
}

// readBackend frames the PDUs of one backend connection and handles
// each; what it writes for the client is sent once nothing more is
// buffered from the backend, so a search's entries leave in few writes.
func (ss *session) readBackend(b *backend) {
	for {
		raw, err := b.rd.Next()
		skip, err := b.answered(raw, err, ss.srv.file.Defaults.ConnectTimeout)
		if errors.Is(err, errStillBusy) {
			continue
		}
		if err != nil {
			b.err = err
			b.broken.Store(true)
		}
		ss.mu.Lock()
		if ss.ended || b.closed {
			ss.mu.Unlock()
			return
		}
		if err != nil {
			if errors.Is(err, wire.ErrTooLarge) {
				ss.oversized(b, err)
			} else {
				ss.onBackendEnd(b, err)
			}
			ss.settle()
			ss.mu.Unlock()
			return
		}
		if !skip { // the core's own search (firstAnswer): still flush what waits
			ss.onBackend(b, raw)
		} else if !b.probe && b.holding {
			ss.release(b)
		}
		ss.settle(b.rd.Buffered() == 0)
		ss.mu.Unlock()
	}
}

// send writes o to b. A write that fails was not (completely) sent: the
// failure is handled like any other, and o fails over like a read.
func (ss *session) send(o *op, b *backend) {
	if b.broken.Load() {
		ss.lost(b)
		if ss.ended { // abort broke it: nothing to reroute for
			return
		}
		ss.reroute(o)
		return
	}
	raw := ss.pagedFor(o, b)
	o.be, o.sent, o.seen, o.skip = b, false, 0, o.base+o.forwarded
	ss.pend(o, b)
	if b.holding {
		b.held = append(b.held, heldOp{o, raw})
		return
	}
	if _, err := b.conn.Write(raw); err != nil {
		ss.connEnded(b, err)
		return
	}
	ss.owe(o, b)
	o.sent = true
}

// release sends the operations held while the core's own search on b
// was unanswered, in order; those abandoned or moved meanwhile are not
// sent.
func (ss *session) release(b *backend) {
	held := b.held
	b.held, b.holding = nil, false
	for _, h := range held {
		if ss.pending[h.o.m.ID] != h.o || h.o.be != b || h.o.sent {
			continue
		}
		if _, err := b.conn.Write(h.raw); err != nil {
			ss.connEnded(b, err)
			return
		}
		ss.owe(h.o, b)
		h.o.sent = true
	}
}

// reroute finds another connection for an operation that was not sent.
func (ss *session) reroute(o *op) {
	ident := o.m.Op != wire.TagBindRequest
	var b *backend
	var diag string
	if o.rule != nil {
		var rest []string
		if b, rest, diag = ss.attach(o.cands, o.ring, ident); b != nil {
			o.cands = rest
		}
	} else {
		b, diag = ss.userTarget(ident, "")
	}
	if b == nil {
		ss.unserved(o, o.rule, diag)
		return
	}
	ss.send(o, b)
}

func (ss *session) onBackend(b *backend, raw []byte) {
	if b.closed {
		return
	}
	id, tag, ok := wire.Peek(raw)
	if !ok {
		ss.backendFailed(b, errors.New("malformed PDU from server"))
		return
	}
	if id == 0 { // unsolicited notification
		if m, err := wire.Parse(raw); err == nil && m.Op == wire.TagExtendedResponse && m.ResultCode == wire.ResultProtocolError {
			// The server could not decode what this client sent (the
			// core parses requests shallowly): the client's failure.
			ss.srv.log.Warn("server disconnected the client", ss.who("target", b.name, "result", wire.ResultName(m.ResultCode), "err", m.Diagnostic)...)
			ss.write(wire.NoticeOfDisconnection(wire.ResultProtocolError, b.name+": "+m.Diagnostic))
			ss.ended = true
			return
		}
		ss.backendFailed(b, errors.New("notice of disconnection from server")) // the server is going away
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
			if o.seen <= o.skip {
				return // the client has it from the failed server (or earlier pages)
			}
			o.forwarded++
		}
		ss.write(raw)
		return
	}
	m := &b.final // used only until the next PDU: no allocation per answer
	if err := wire.ParseInto(m, raw); err != nil {
		ss.backendFailed(b, fmt.Errorf("malformed response: %w", err))
		return
	}
	if o.m.Op == wire.TagBindRequest {
		ss.bound(o, b, m.ResultCode)
	} else if m.ResultCode == wire.ResultSuccess && (o.m.Op == wire.TagModifyRequest || o.m.Op == wire.TagExtendedRequest) {
		ss.passwordChanged(o, b, raw)
	}
	if o.paged != nil && tag == wire.TagSearchResultDone {
		if ss.restartPage(o, b, m, raw) {
			return
		}
		ss.pagedDone(o, b, raw)
	}
	if o.rule != nil && o.rule.KeepConn && m.ResultCode == wire.ResultSuccess && b != ss.primary {
		ss.primary, ss.cands, ss.ring = b, o.cands, o.ring
	}
	ss.finish(o, m.ResultCode, raw)
}

// bound records the identity a bind established on b.
func (ss *session) bound(o *op, b *backend, code int) {
	switch {
	case code == wire.ResultSuccess && anonymousBind(o.m):
		// Anonymous (or unauthenticated, RFC 4513 §5.1.2) stays
		// anonymous: the pre-bind caps stay, nothing to re-bind with.
		ss.anonymous()
		b.gen = 0
	case code == wire.ResultSuccess:
		prev, prevGen := ss.cred, ss.gen
		ss.cred, ss.credOK, ss.credWhy = o.m.Raw, ss.sasl == nil, ""
		ss.user, ss.norm = o.m.BindName, dlp.NormalizeDN(o.m.BindName)
		ss.gen++
		b.gen, ss.sasl = ss.gen, nil
		ss.sameIdentity(prev, prevGen)
		ss.max.Store(int64(ss.srv.cfg.MaxPDU))
	case code == wire.ResultSaslBindInProgress:
		ss.sasl = b
		return
	default: // a failed bind leaves the connection anonymous (RFC 4511 §4.2.1)
		ss.anonymous()
		b.gen = 0
	}
	// Idle connections with the old identity are of no further use.
	stale := func(c *backend) bool { return c != b && !c.closed && !ss.fits(c) && !ss.busy(c) }
	if !slices.ContainsFunc(ss.conns, stale) {
		return // the common case: no copy of the list
	}
	for _, c := range slices.Clone(ss.conns) {
		if stale(c) {
			ss.closeBackend(c)
		}
	}
}

// anonymous makes the connection anonymous after a failed bind or an
// anonymous one, with the caps of a client that has not bound.
func (ss *session) anonymous() {
	ss.cred, ss.credWhy, ss.user, ss.norm, ss.sasl = nil, "", "", "", nil
	ss.gen++
	ss.max.Store(PreBindMaxPDU)
}

// anonymousBind reports whether m, a bind request, asks for no identity:
// a simple bind without a password (anonymous, or unauthenticated with a
// name, RFC 4513 §5.1) or without a name (slapd's "allow bind_anon_cred"
// accepts one with a password as anonymous, ignoring the password), which
// grants a client nothing more than not binding does.
func anonymousBind(m *wire.Message) bool {
	return m.BindSimple && (len(m.BindPassword) == 0 || m.BindName == "")
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
		ss.connEnded(b, err)
		return
	}
	ss.closeBackend(b) // idle: see lost
}

// errProtocolNotice is a server's Notice of Disconnection with
// protocolError: it could not decode what it was sent.
var errProtocolNotice = errors.New("notice of disconnection (protocolError)")

// serverFailed reports whether err, which ended a connection to server
// name, is the server's failure. A server that stops inside a PDU, sends
// bytes that are not LDAP or does not answer in time has failed; one that
// could not decode what it was sent has not. A connection that just ends
// is for a check to judge: a server that answers on a new connection at
// once is up and ended this one on purpose, because of what the client
// sent (slapd closes a connection after a PDU it cannot decode, or beyond
// conn_max_pending operations) — the client's failure.
func (s *Server) serverFailed(name string, err error) bool {
	var pe *wire.ProtocolError
	var ne net.Error
	switch {
	case errors.Is(err, errProtocolNotice):
		return false
	case errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &pe), errors.As(err, &ne) && ne.Timeout():
		return true
	}
	return !s.answers(name)
}

// connEnded handles a backend connection that ended, or could not be
// written, with operations in flight: a failure (backendFailed), or the
// server's reaction to this client (serverFailed), whose operations
// there are answered and not replayed elsewhere.
func (ss *session) connEnded(b *backend, err error) {
	if b.closed || ss.isAborted() || ss.srv.serverFailed(b.name, err) {
		ss.backendFailed(b, err)
		return
	}
	ss.srv.log.Warn("server closed the connection of this client", ss.who("target", b.name, "err", err)...)
	ss.closeBackend(b) // the next operation connects again, to the same server
	if ss.sasl == b {
		ss.sasl = nil
	}
	for _, o := range ss.opsOn(b) {
		switch {
		case !o.sent:
			ss.reroute(o)
		case o.follows != followNone:
			ss.endFollow(o, b.name+" closed the connection")
		case !wire.IsRead(o.m):
			ss.reply(o, wire.ResultUnavailable, fmt.Sprintf(
				"%s closed the connection after the %s request was sent: its outcome is unknown; check the directory before retrying", b.name, o.name))
		default:
			ss.reply(o, wire.ResultUnavailable, fmt.Sprintf(
				"%s closed the connection with the %s request in flight; it answers on a new connection, so it is not retried elsewhere", b.name, o.name))
		}
	}
}

// backendFailed handles a connect-level or I/O failure of b: b is OFFLINE
// for everyone, and its operations in flight are replayed elsewhere —
// except writes already sent, whose outcome is unknown.
func (ss *session) backendFailed(b *backend, err error) {
	if b.closed {
		return
	}
	if ss.isAborted() { // abort closed it: the session ends, the server did not fail
		ss.ended = true
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
	for _, o := range ss.opsOn(b) {
		switch {
		case ss.ended:
			delete(ss.pending, o.m.ID)
			ss.track(o, nil)
		case o.sent && !wire.IsRead(o.m):
			ss.reply(o, wire.ResultUnavailable, fmt.Sprintf(
				"%s failed after the %s request was sent: its outcome is unknown; check the directory before retrying", b.name, o.name))
		case o.sent && o.follows != followNone:
			ss.endFollow(o, b.name+" failed")
		case o.m.Op == wire.TagBindRequest && !o.m.BindSimple && sasl:
			ss.reply(o, wire.ResultUnavailable, b.name+" failed during a multi-step SASL bind; start the bind again")
		default:
			ss.replay(o, b)
		}
	}
}

// oversized handles a server's PDU beyond MaxBackendPDU: the server is not
// down, but the connection cannot go on; its operations fail (a write's
// outcome is unknown) and are not replayed, since any replica would send
// the same PDU.
func (ss *session) oversized(b *backend, err error) {
	ss.srv.log.Warn("oversized PDU from server", ss.who("target", b.name, "err", err)...)
	ss.closeBackend(b)
	if ss.sasl == b {
		ss.sasl = nil
	}
	for _, o := range ss.opsOn(b) {
		if o.sent && !wire.IsRead(o.m) {
			ss.reply(o, wire.ResultUnavailable, fmt.Sprintf("%s sent a PDU over %d bytes: the outcome of the %s is unknown", b.name, MaxBackendPDU, o.name))
		} else {
			ss.reply(o, 11, fmt.Sprintf("%s sent a PDU over %d bytes", b.name, MaxBackendPDU)) // adminLimitExceeded
		}
	}
}

// opsOn lists the operations pending on b (on any backend when b is
// nil) in the order they were sent.
func (ss *session) opsOn(b *backend) []*op {
	var ops []*op
	for _, o := range ss.pending {
		if o.be == b || (b == nil && o.be != nil) {
			ops = append(ops, o)
		}
	}
	slices.SortFunc(ops, func(a, c *op) int { return cmp.Compare(a.seq, c.seq) })
	return ops
}

// replay sends o again on the next server that has not failed with it.
func (ss *session) replay(o *op, failed *backend) {
	var b *backend
	var diag string
	o.failed = append(o.failed, failed.name)
	failedHere := func(name string) bool { return slices.Contains(o.failed, name) }
	if o.rule != nil {
		var rest []string
		b, rest, diag = ss.attach(slices.DeleteFunc(slices.Clone(o.cands), failedHere), o.ring, o.m.Op != wire.TagBindRequest)
		o.cands = rest
	} else {
		ss.cands = slices.DeleteFunc(slices.Clone(ss.cands), failedHere)
		b, diag = ss.userTarget(o.m.Op != wire.TagBindRequest, "")
	}
	if b == nil {
		ss.unserved(o, o.rule, failed.name+" failed; "+diag)
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
	ss.dropLine(b.conn)
	ss.conns = slices.DeleteFunc(ss.conns, func(c *backend) bool { return c == b })
	if ss.primary == b {
		ss.primary = nil
	}
}
