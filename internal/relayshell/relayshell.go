// Package relayshell is what the edge (relay/) and the front (origin/)
// share around their connections: the event loops they run on, admission
// against max_conns, the drain of Shutdown, the options of the listening
// socket, the refusal-log limiter and the Killer that lets loopguard.Own
// close a connection of another loop. What each does with a connection
// (dial an origin, read a PROXY header) stays in its own package.
//
//	s.Init(h, cfg.MaxConns, log, now)
//	go s.Serve(ln, keepalive)       // listener options, then the loops
//	if s.Admit() != relayshell.Admitted { … } // in Handler.Open
//	s.Release()                     // when an admitted connection is done
//	s.Shutdown(ctx, timeout, log)   // stop accepting, drain, cut the rest
package relayshell

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/edgefleet/edgefleet/internal/evloop"
	"github.com/edgefleet/edgefleet/internal/loglimit"
	"github.com/edgefleet/edgefleet/internal/sockopt"
)

// Shell is one relay's loops, admission and drain. Its zero value is not
// ready: call Init first.
type Shell struct {
	// Server runs the connections; Init sets its handler, log, clock and
	// pipe budget.
	Server evloop.Server
	// Refusals limits the relay's refusal lines (loglimit.Refusals).
	Refusals *loglimit.Limiter

	max int
	// ctx is cancelled when Shutdown is done waiting, so lookups started
	// for connections stop too.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	active  int           // admitted connections not released yet
	closing bool          // Shutdown called: admit nothing more
	idle    chan struct{} // closed once closing and active is 0
}

// Init readies s for a relay whose connections h handles: at most
// maxConns admitted at a time, accept failures logged to log, now the
// clock of the loops and of the refusal limiter (nil: time.Now).
func (s *Shell) Init(h evloop.Handler, maxConns int, log *slog.Logger, now func() time.Time) {
	s.Server = evloop.Server{Handler: h, Log: log, Now: now, MaxPipes: evloop.PipesFor(maxConns)}
	s.Refusals = loglimit.Refusals(now)
	s.max = maxConns
	s.idle = make(chan struct{})
	s.ctx, s.cancel = context.WithCancel(context.Background())
}

// Context is cancelled once Shutdown is done waiting for connections.
func (s *Shell) Context() context.Context { return s.ctx }

// Serve sets the listening socket's options, which accepted sockets
// inherit (TCP_NODELAY and keepalive: no setsockopt per connection), and
// serves ln on the loops until Shutdown (then it returns nil) or until
// the listener fails for good. Serve takes ln over: it is closed at once,
// the loops accept on descriptors of their own. A connection the kernel
// completed before Serve set the options keeps the kernel's defaults.
func (s *Shell) Serve(ln net.Listener, keepalive sockopt.Keepalive) error {
	if s.Closing() {
		ln.Close()
		return nil
	}
	SetListener(ln, keepalive)
	return s.Server.Serve(ln)
}

// SetListener sets TCP_NODELAY and keepalive on a listening socket, for
// the sockets it accepts to inherit.
func SetListener(ln net.Listener, keepalive sockopt.Keepalive) {
	keepalive.Set(ln)
	sockopt.NoDelay(ln)
}

// GoKeepalive is what Go's net package sets on every connection it
// accepts (15 s idle, 15 s interval, 9 probes): the front's outer
// connections keep it, inherited from the listening socket.
var GoKeepalive = sockopt.Keepalive{Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}

// Keepalive is a relay's TCP keepalive for a period: idle time and
// interval period, 4 probes; period 0 turns it off.
func Keepalive(period time.Duration) sockopt.Keepalive {
	if period <= 0 {
		return sockopt.Keepalive{}
	}
	return sockopt.Keepalive{Idle: period, Interval: period, Count: 4}
}

// Admission is Admit's answer.
type Admission int

const (
	Admitted Admission = iota // holds a slot until Release
	Closing                   // refused: Shutdown was called
	Full                      // refused: max_conns are open
)

// Admit takes a slot for a new connection, or says why not.
func (s *Shell) Admit() Admission {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing:
		return Closing
	case s.active >= s.max:
		return Full
	}
	s.active++
	return Admitted
}

// Release gives an admitted connection's slot back and wakes Shutdown
// after the last one.
func (s *Shell) Release() {
	s.mu.Lock()
	s.active--
	if s.closing && s.active == 0 {
		s.wake()
	}
	s.mu.Unlock()
}

// Active is the number of admitted connections not released yet.
func (s *Shell) Active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

// Closing reports whether Shutdown was called.
func (s *Shell) Closing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// wake closes s.idle once; s.mu is held.
func (s *Shell) wake() {
	select {
	case <-s.idle:
	default:
		close(s.idle)
	}
}

// NoTimeout is Shutdown's timeout for waiting as long as ctx allows.
const NoTimeout time.Duration = -1

// Shutdown stops accepting at once and waits for the admitted
// connections to be released until ctx is done or timeout has passed
// (NoTimeout: ctx alone), then closes the rest and waits for them. It
// returns ctx's error when it had to cut connections because of ctx, nil
// otherwise. log, when set, gets a line when there are connections to
// drain and one when some are cut; nil writes none.
func (s *Shell) Shutdown(ctx context.Context, timeout time.Duration, log *slog.Logger) error {
	s.mu.Lock()
	s.closing = true
	if s.active == 0 {
		s.wake()
	}
	open := s.active
	s.mu.Unlock()
	s.Server.Close()
	defer s.Server.Stop()
	if open > 0 && log != nil {
		log.Info("draining", "connections", open, "drain_timeout", timeout)
	}
	var expired <-chan time.Time
	if timeout != NoTimeout {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C
	}
	var err error
	select {
	case <-s.idle:
		s.cancel()
		return nil
	case <-expired:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.cancel()
	n := s.Active()
	s.Server.Abort()
	if n > 0 && log != nil {
		log.Warn("drain timeout: closing connections", "connections", n)
	}
	<-s.idle
	return err
}

// Killer closes a connection from another loop: the io.Closer loopguard.Own
// cuts a loop with, from the side that finds it.
type Killer struct{ C *evloop.Conn }

// Close kills the connection on its own loop.
func (k Killer) Close() error {
	k.C.Kill()
	return nil
}
