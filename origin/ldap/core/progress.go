package core

import (
	"errors"
	"sync/atomic"
	"time"
)

// A server that is slow to answer is not a server that failed. The core
// bounds the wait for a server's answer in three places, all its own
// requests: the root DSE search ahead of a fresh connection's first
// request (firstAnswer), the monitor's check, and the check that judges a
// connection the server ended (answers). A frozen server (SIGSTOP, a hung
// process: the kernel still accepts) sends nothing on any connection; a
// busy one — its worker threads streaming large results to other clients,
// on a machine short of CPU — keeps sending on the connections it is
// serving. So when such a wait expires, the core asks whether the server
// sent anything to the core on any connection meanwhile: if it did, the
// server is alive and merely busy, and the wait is not a failure (a fresh
// connection's bound is renewed, a check is inconclusive). A client's own
// operations are never bounded at all: a bind whose password hash costs
// seconds is the client's cost, not the server's fault.
//
// A server can also be silent because it is busy: when every worker
// thread is inside a client's operation that takes seconds and sends
// nothing until it is done (binds against a slow password hash, all at
// once), the core's own request waits in the server's queue behind them.
// So a silent server that owes the core answers to client requests is
// given busyLimit from the later of its last PDU and the moment it began
// to owe; only silence longer than that, or silence while it owed nothing
// but the core's own request, is a failure. A frozen server that clients
// keep sending requests to is thus found within busyLimit plus
// ConnectTimeout: more requests do not restart the clock, only a PDU does.

// busyLimit is how long a server that owes answers to client requests
// may stay silent before a bounded wait of the core's counts as a failure:
// far above any password hash, as rebindTimeout. A variable only so that
// tests of a frozen server need not wait it out.
var busyLimit = rebindTimeout

// progress is what the core heard from one server over all its
// connections (sessions' and checks'), and what it owes.
type progress struct {
	n atomic.Uint64 // PDUs received
	// owing counts the client requests written to the server and not
	// over yet (answered, abandoned, moved or ended with their session:
	// op.owes); quiet is when the server last spoke, or began to owe
	// when it owed nothing before (unix nanoseconds).
	owing atomic.Int64
	quiet atomic.Int64
}

// heard records a PDU from the server.
func (p *progress) heard() {
	p.n.Add(1)
	p.quiet.Store(time.Now().UnixNano())
}

// count is the number of PDUs received so far: a mark to compare with.
func (p *progress) count() uint64 { return p.n.Load() }

// owe records a client request written to the server, one that has an
// answer (not abandon or unbind); done, that it is over.
func (p *progress) owe() {
	if p.owing.Add(1) == 1 {
		p.quiet.Store(time.Now().UnixNano())
	}
}

func (p *progress) done() { p.owing.Add(-1) }

// busy reports whether a bounded wait that expired now found the server
// busy rather than frozen: it sent something since mark, or it owes
// client requests and has been silent for less than busyLimit.
func (p *progress) busy(mark uint64) bool {
	if p.n.Load() != mark {
		return true
	}
	return p.owing.Load() > 0 && time.Since(time.Unix(0, p.quiet.Load())) < busyLimit
}

// heardFrom is every server's progress; fixed at New, so read without a
// lock.
type heardFrom map[string]*progress

func newHeard(servers []string) heardFrom {
	h := make(heardFrom, len(servers))
	for _, name := range servers {
		h[name] = new(progress)
	}
	return h
}

// of is server name's progress.
func (h heardFrom) of(name string) *progress {
	if p := h[name]; p != nil {
		return p
	}
	return new(progress) // not a server of the file: nothing to share
}

// errStillBusy is a first-answer bound that expired while the server
// was busy (above): the reader renewed it and waits on.
var errStillBusy = errors.New("server busy: first-answer bound renewed")

// errServerBusy is a check that got no answer in time from a server that
// was busy (above): inconclusive, not a failure.
var errServerBusy = errors.New("no answer in time, but the server was sending on other connections, or working on a client's request, meanwhile: busy, not down")
