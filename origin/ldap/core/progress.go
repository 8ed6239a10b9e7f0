package core

import (
	"errors"
	"sync/atomic"
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

// heard counts the PDUs the core received from each server over all its
// connections (sessions' and checks'); fixed at New, so read without a
// lock.
type heard map[string]*atomic.Uint64

func newHeard(servers []string) heard {
	h := make(heard, len(servers))
	for _, name := range servers {
		h[name] = new(atomic.Uint64)
	}
	return h
}

// of is server name's count.
func (h heard) of(name string) *atomic.Uint64 {
	if c := h[name]; c != nil {
		return c
	}
	return new(atomic.Uint64) // not a server of the file: nothing to share
}

// errStillBusy is a first-answer bound that expired while the server
// was sending on other connections: the reader renewed it and waits on.
var errStillBusy = errors.New("server busy: first-answer bound renewed")

// errServerBusy is a check that got no answer in time from a server that
// was sending on other connections meanwhile: inconclusive, not a
// failure.
var errServerBusy = errors.New("no answer in time, but the server was sending on other connections meanwhile: busy, not down")
