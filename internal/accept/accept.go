// Package accept is the LDAP core's accept loop: it hands each accepted
// connection on and outlives the errors that waiting cures (which those
// are is internal/errclass's Temporary). The edge and the front accept on
// internal/evloop, which follows the same rules. ErrorLog and Limiter keep
// such errors, and refusals, from flooding the log.
//
//	l := accept.Loop{Handle: s.handle, Closing: s.closing, Log: log}
//	err := l.Serve(ln) // nil after Shutdown; otherwise the listener really failed
//
// Temporary accept errors (out of file descriptors or memory, an aborted
// connection) never end serving: the loop waits 5 ms, doubling to 1 s as
// net/http does, and logs one line per logWindow at most.
package accept

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/edgefleet/edgefleet/internal/errclass"
)

// Backoff bounds: the first wait after a temporary error, and the longest.
const (
	minBackoff = 5 * time.Millisecond
	maxBackoff = time.Second
	// logWindow is how often at most a temporary accept error is logged
	// (the line says how many were suppressed since the last one).
	logWindow = 10 * time.Second
)

// Loop is the configuration of one server's accept loop.
type Loop struct {
	// Handle serves an accepted connection; it is called in the loop's
	// goroutine and must not block (start a goroutine or hand it to a
	// worker).
	Handle func(net.Conn)
	// Closing reports whether the server closed the listener itself
	// (Shutdown): an accept error then ends Serve with nil.
	Closing func() bool
	// Log receives the temporary-error lines; nil discards them.
	Log *slog.Logger
	// Now, if non-nil, is used instead of time.Now (internal/clock): the
	// clock of the log rate limit. The back-off waits run on the runtime's
	// clock.
	Now func() time.Time
}

// Serve accepts on ln until the listener fails for good or Closing reports
// true. It returns nil in the second case and the accept error, naming the
// listener, in the first: the caller ends the process rather than live on
// without accepting.
func (l *Loop) Serve(ln net.Listener) error {
	log := l.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	limit := NewLimiter(1, logWindow, l.Now)
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if l.Closing != nil && l.Closing() {
				return nil
			}
			if !errclass.Temporary(err) {
				return fmt.Errorf("accept on %s: %w", ln.Addr(), err)
			}
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			if ok, suppressed := limit.Allow(); ok {
				log.Warn("accept failed, retrying", "addr", ln.Addr().String(), "err", err,
					"retry_in", backoff, "suppressed", suppressed)
			}
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		l.Handle(c)
	}
}
