// Package evloop carries whole relayed TCP connections on a few event
// loops (DefaultLoops: one per two CPUs), working on raw file descriptors: the accept, a
// non-blocking connect, the first bytes and a header written in one
// system call, the copy both ways (read and write for small bursts,
// splice(2) through a pooled pipe for bulk data), half-close and close.
// No goroutine is started per connection and none waits for one: an idle
// relayed connection costs its two sockets and a few hundred bytes. The
// edge and the origin front run on it (docs/architecture.md: short
// connections are where a goroutine per connection loses to HAProxy).
//
//	s := &evloop.Server{Handler: h, Log: log}
//	ln, err := evloop.Listen(":636") // SO_REUSEPORT: Serve gives each loop a socket of its own
//	go s.Serve(ln)                   // the loops accept on ln; s.Close stops them
//	// in h.Open:    c.Dial(origin, &opts)           (the edge)
//	//           or  c.ReadFirst(timeout)            (the front, for a header)
//	// in h.Dialed:  c.Relay(header, screen)
//	// in h.Closed:  count and log; both sockets are closed already
//
// Every Handler method runs in the loop that owns the connection and must
// not block. A connection stays in the loop that accepted it.
package evloop

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/edgefleet/edgefleet/internal/accept"
	"github.com/edgefleet/edgefleet/internal/clock"
	"github.com/edgefleet/edgefleet/internal/errclass"
	"github.com/edgefleet/edgefleet/internal/loglimit"
	"github.com/edgefleet/edgefleet/internal/pipepool"
	"golang.org/x/sys/unix"
)

// Handler is what a relay does with its connections. Each method is
// called in the connection's loop and must not block: a slow step (a
// name to resolve) goes to a goroutine that comes back with Conn.Post.
type Handler interface {
	// Open is called for each accepted connection. It calls Dial,
	// ReadFirst or Close.
	Open(c *Conn)
	// Received is called in ReadFirst mode with every byte read from the
	// client so far, each time more arrive; err is io.EOF when the client
	// finished sending, ErrTimeout when ReadFirst's time ran out, or the
	// read's error. It calls Consume, Dial or Close, or returns to wait
	// for more.
	Received(c *Conn, b []byte, err error)
	// Dialed is called when a Dial ended: connected (err nil; then it
	// calls Relay or Close) or failed (then Dial again, or Close).
	Dialed(c *Conn, err error)
	// Closed is called once per connection, after both sockets are
	// closed, with how it ended.
	Closed(c *Conn, res Result)
}

// Result is how a connection ended.
type Result struct {
	Up     int64  // payload bytes from the client to the upstream (a header excluded)
	Down   int64  // bytes from the upstream to the client
	Reason string // a Reason* value, or what the handler passed to Close
	Err    error  // the failure behind a client-error or server-error
}

// Reason values the loops set.
const (
	ReasonEOF         = "eof"          // both sides finished cleanly
	ReasonClientError = "client-error" // a read or write on the client's socket failed first
	ReasonServerError = "server-error" // a read or write on the upstream's socket failed first
	ReasonAborted     = "aborted"      // closed by Server.Abort
	ReasonKilled      = "killed"       // closed by Conn.Kill
)

// ErrTimeout is Dialed's error when the connect took longer than
// DialOptions.Timeout, and Received's when ReadFirst's time ran out.
var ErrTimeout error = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// Server runs the loops.
type Server struct {
	Handler Handler
	// Loops is the number of event loops; 0 means DefaultLoops.
	Loops int
	// Log receives accept failures (rate-limited); nil discards them.
	Log *slog.Logger
	// Now, if non-nil, is used instead of time.Now (internal/clock): the
	// clock of Conn.Now and Conn.DialDuration, what a handler measures and
	// logs. Timeouts run on the runtime's clock.
	Now func() time.Time
	// MaxPipes bounds the splice pipes (two descriptors each) the
	// connections hold at once; a direction that finds none left copies
	// through the loop's buffer instead. A direction holds its pipe while
	// its destination is full: without a bound every stalled
	// connection would hold one. 0: no bound. PipesFor gives the
	// relays' figure.
	MaxPipes int
	// MaxGrown bounds, per loop, the connections whose first read
	// (ReadFirst) holds a MaxFirst buffer at once; 0 means GrownPerLoop.
	// Past it, a first read that would grow is handed to Received with
	// ErrGrowLimit instead.
	MaxGrown int

	pipes    atomic.Int64 // pipes held now
	grows    atomic.Int64 // first reads grown to MaxFirst, ever (Grows)
	once     sync.Once
	startErr error
	loops    []*loop
	mu       sync.Mutex
	next     int // the loop Adopt hands the next connection to
	closed   bool
	stopped  bool
	limit    *loglimit.Limiter
}

// DefaultLoops is one loop per two CPUs the Go runtime may use
// (GOMAXPROCS), at least one. A relayed short connection costs the kernel
// about as much again as the loop (TCP on both sockets, the peers'
// processing on loopback), and on 2 CPUs a second loop, even with a
// listening socket of its own, measured more system calls per short
// connection (18.2–18.5 against 17.2–17.4 at 16 clients, 32.4–33.5
// against 27.1–28.0 at one) for no rate gain (docs/benchmarks.md).
// GOMAXPROCS sets it.
func DefaultLoops() int {
	return max(1, runtime.GOMAXPROCS(0)/2)
}

// takePipe counts a pipe about to be taken, or reports false when
// MaxPipes are held already.
func (s *Server) takePipe() bool {
	if s.pipes.Add(1) > int64(s.MaxPipes) && s.MaxPipes > 0 {
		s.pipes.Add(-1)
		return false
	}
	return true
}

func (s *Server) pipeGone() { s.pipes.Add(-1) }

// GrownPerLoop is MaxGrown's default: 1024 first reads of MaxFirst
// bytes, 16.8 MB per loop at most, whatever the number of connections.
const GrownPerLoop = 1024

// ErrGrowLimit is Received's error when the client's first bytes fill
// ReadFirst's small buffer, Received has not decided on them, and the
// loop holds MaxGrown large buffers already: b is the full small buffer,
// and no more is read.
var ErrGrowLimit = errors.New("evloop: too many connections hold a large first read at once")

// Grows is how many first reads have grown to MaxFirst bytes so far.
func (s *Server) Grows() int64 { return s.grows.Load() }

// mayGrow takes one of the loop's large first reads, if MaxGrown allows.
func (l *loop) mayGrow() bool {
	max := l.s.MaxGrown
	if max <= 0 {
		max = GrownPerLoop
	}
	if l.grown >= max {
		return false
	}
	l.grown++
	l.s.grows.Add(1)
	return true
}

// PipesFor is the pipe budget (MaxPipes) of a relay that holds at most
// maxConns connections: a quarter of them may splice at once, at least
// as many as the pool keeps idle (pipepool.Size).
func PipesFor(maxConns int) int { return max(pipepool.Size, maxConns/4) }

// DescriptorsFor is the most descriptors the loops hold for maxConns
// connections with MaxPipes set to PipesFor: two sockets each, and two
// per pipe — at most PipesFor, and at most two per connection. The pool
// adds none: it makes a pipe only when it has no idle one, so the pipes
// in use and idle together never outnumber the most in use at once.
func DescriptorsFor(maxConns int) int {
	return 2*maxConns + 2*min(PipesFor(maxConns), 2*maxConns)
}

// MaxConnsFor is the most connections a relay can hold within nofile
// descriptors (RLIMIT_NOFILE): DescriptorsFor each, extra more per
// connection for what the process holds besides the loops (an LDAP core
// in the same process: its two sockets), and reserve for the process
// itself; at least 1, at most limit. HAProxy derives its default maxconn
// from ulimit -n the same way.
func MaxConnsFor(nofile uint64, extra, reserve, limit int) int {
	fits := func(n int) bool { return uint64(DescriptorsFor(n)+extra*n+reserve) <= nofile }
	lo, hi := 1, limit
	for lo < hi { // the largest n that fits
		mid := lo + (hi-lo+1)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

func (s *Server) now() time.Time {
	return clock.Now(s.Now)
}

func (s *Server) start() error {
	s.once.Do(func() {
		n := s.Loops
		if n <= 0 {
			n = DefaultLoops()
		}
		if s.Log == nil {
			s.Log = slog.New(slog.DiscardHandler)
		}
		s.limit = loglimit.New(1, 10*time.Second, s.Now)
		for range n {
			l, err := newLoop(s)
			if err != nil {
				s.startErr = err
				for _, l := range s.loops {
					l.post(l.quit)
				}
				return
			}
			s.loops = append(s.loops, l)
			go l.run()
		}
	})
	return s.startErr
}

// listener is one listening socket, with a descriptor of its own in each
// loop (closing one never races an accept in another).
type listener struct {
	s    *Server
	addr netip.AddrPort // the bound address when it is not a wildcard, else zero
	name string
	done chan error // Serve's result
	once sync.Once
	open int // loops still holding a descriptor; under s.mu
}

func (ln *listener) finish(err error) {
	ln.once.Do(func() { ln.done <- err })
}

// Serve accepts connections on ln in every loop until Close (it then
// returns nil) or until a listening socket fails for good (it returns
// the accept error, naming the address). Serve takes ln over: it is
// closed at once (the loops accept on descriptors of their own), so only
// Close stops serving. ln must be a *net.TCPListener.
//
// When ln has SO_REUSEPORT (Listen makes it so), the first loop accepts
// on ln's socket and every other loop on a socket of its own bound to
// the same address and port (a shard, with ln's options): the kernel
// queues each new connection on one shard, and only that loop wakes.
// Without it every loop watches ln's one socket, and a connection may
// wake them all.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.start(); err != nil {
		ln.Close()
		return err
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		ln.Close()
		return fmt.Errorf("evloop: %T is not a TCP listener", ln)
	}
	lst := &listener{s: s, name: ln.Addr().String(), done: make(chan error, 1)}
	if a := tl.Addr().(*net.TCPAddr); !a.IP.IsUnspecified() {
		ap := a.AddrPort()
		lst.addr = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	raw, err := tl.SyscallConn()
	if err != nil {
		ln.Close()
		return err
	}
	fds := make([]int, 0, len(s.loops))
	var derr error
	raw.Control(func(fd uintptr) {
		shards := hasReusePort(int(fd))
		for i := range s.loops {
			var nfd int
			var err error
			if i == 0 || !shards {
				if nfd, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); err != nil {
					err = os.NewSyscallError("dup", err)
				}
			} else if nfd, err = newShard(int(fd)); err != nil {
				err = fmt.Errorf("evloop: a listening socket per loop on %s: %w", lst.name, err)
			}
			if err != nil {
				derr = err
				return
			}
			fds = append(fds, nfd)
		}
	})
	ln.Close() // out of Go's poller: only the loops watch the socket now
	if derr != nil {
		for _, fd := range fds {
			sysClose(fd)
		}
		return derr
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		for _, fd := range fds {
			sysClose(fd)
		}
		return nil
	}
	lst.open = len(fds)
	// Posted under mu, as Adopt does: a Stop's quit is posted after, so
	// every loop runs addListener (and gives the descriptor up) before it
	// ends; posted after mu, a loop could end first and Serve would wait
	// for ever.
	for i, l := range s.loops {
		fd := fds[i]
		l.post(func() { l.addListener(lst, fd) })
	}
	s.mu.Unlock()
	return <-lst.done
}

// Close stops accepting on every listener (Serve returns nil); open
// connections go on.
func (s *Server) Close() {
	if s.start() != nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	for _, l := range s.loops {
		l.post(l.dropListeners)
	}
}

// Abort closes every open connection (Result.Reason ReasonAborted); it
// returns at once, the Closed calls follow in the loops.
func (s *Server) Abort() {
	if s.start() != nil {
		return
	}
	for _, l := range s.loops {
		l.post(l.abortAll)
	}
}

// Stop ends the loops, once Close and the end of every connection have
// left them nothing to do (what is still open is aborted first).
func (s *Server) Stop() {
	if s.start() != nil {
		return
	}
	s.mu.Lock()
	s.closed, s.stopped = true, true
	s.mu.Unlock()
	for _, l := range s.loops {
		l.post(func() { l.dropListeners(); l.abortAll(); l.quit() })
	}
}

// ErrStopped is Adopt's error after Stop: no loop would serve the
// connection.
var ErrStopped = errorString("evloop: server stopped")

// Adopt hands a connection accepted elsewhere to a loop, which serves it
// like one of its own (Open first, with Conn.Data set to data). c must be
// a *net.TCPConn; Adopt takes it over and closes it (the loop holds a
// duplicate descriptor).
func (s *Server) Adopt(c net.Conn, data any) error {
	if err := s.start(); err != nil {
		c.Close()
		return err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return fmt.Errorf("evloop: %T is not a TCP connection", c)
	}
	peer, local := unmapped(tc.RemoteAddr()), unmapped(tc.LocalAddr())
	raw, err := tc.SyscallConn()
	if err != nil {
		c.Close()
		return err
	}
	fd := -1
	var derr error
	raw.Control(func(f uintptr) {
		fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	})
	c.Close()
	if derr != nil {
		return os.NewSyscallError("dup", derr)
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		sysClose(fd)
		return ErrStopped
	}
	l := s.loops[s.next%len(s.loops)]
	s.next++
	// Posted under mu: Stop's quit is posted after it, so the loop runs
	// this first.
	l.post(func() { l.open(fd, peer, local, data) })
	s.mu.Unlock()
	return nil
}

func unmapped(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// slot is what a descriptor of a loop stands for: one side of a
// connection or a listener. gen tells a stale event (for a descriptor
// closed and reused since epoll_wait returned) from a current one.
type slot struct {
	c        *Conn
	ln       *lslot
	gen      uint32
	upstream bool // c's upstream socket, not its client one
}

// lslot is a listener's descriptor in one loop, with its accept back-off.
type lslot struct {
	lst       *listener
	fd        int
	backoff   time.Duration
	retryAt   time.Time // non-zero while backing off (out of the epoll set)
	undrained bool      // the last accept batch did not reach EAGAIN
}

// loop is one event loop: an epoll set and the connections it carries.
type loop struct {
	s         *Server
	epfd      int
	file      *os.File        // epfd, in Go's poller
	raw       syscall.RawConn // file's, to park on
	waitFn    func(uintptr) bool
	waitN     int // events wait found
	evfd      int // eventfd: post wakes the loop with it
	events    []unix.EpollEvent
	fds       []slot
	gen       uint32
	now       time.Time
	mono      time.Time // time.Now at the same moment: timeouts run on the real clock
	buf       []byte    // scratch for reads and the first write
	timers    []*tlist
	lns       []*lslot
	conns     map[*Conn]struct{}
	done      bool
	undrained bool // a listener has more to accept: do not park
	accepted  int  // connections accepted on the loop's listeners
	grown     int  // connections holding a MaxFirst first read now (Server.MaxGrown)
	polls     int  // wait's calls in the current raw.Read: the first, then one per wake-up
	wakes     int  // wake-ups from Go's poller
	empty     int  // of them, wake-ups that found no event (another loop took it)

	mu      sync.Mutex
	ended   bool // the loop has ended and closed evfd: post drops what comes
	posted  []func()
	running []func() // posted, swapped out to run
}

// bufSize is the scratch buffer: small reads are copied through it, and a
// read that fills it switches the direction to splice (HAProxy's
// splice-auto does the same). headroom keeps space for a PROXY header
// before a first read.
const (
	bufSize  = 16 << 10
	headroom = 4096 + 256
)

func newLoop(s *Server) (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	l := &loop{s: s, epfd: epfd, evfd: evfd, events: make([]unix.EpollEvent, 256),
		buf: make([]byte, headroom+bufSize), conns: map[*Conn]struct{}{}}
	// Everything in the set is edge-triggered: a level-triggered entry
	// goes back on the ready list each time it is reported, and that
	// wakes Go's poller (which watches this set) for nothing.
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(evfd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	// The epoll descriptor itself goes into Go's poller (an epoll set is
	// readable while it has events): see run.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	l.file = os.NewFile(uintptr(epfd), "epoll")
	raw, err := l.file.SyscallConn()
	if err != nil {
		l.file.Close()
		unix.Close(evfd)
		return nil, err
	}
	l.raw, l.waitFn = raw, l.wait
	return l, nil
}

// post runs f in the loop; once the loop has ended, f is dropped. The
// wake-up is written under mu: the loop closes evfd under mu as it ends,
// and a write after that would land in whatever file took the number.
func (l *loop) post(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.posted = append(l.posted, f)
	one := uint64(1)
	syscall.RawSyscall(unix.SYS_WRITE, uintptr(l.evfd), uintptr(unsafe.Pointer(&one)), 8)
}

func (l *loop) runPosted() {
	var v uint64
	syscall.RawSyscall(unix.SYS_READ, uintptr(l.evfd), uintptr(unsafe.Pointer(&v)), 8)
	l.mu.Lock()
	l.running, l.posted = l.posted, l.running[:0]
	l.mu.Unlock()
	for i, f := range l.running {
		f()
		l.running[i] = nil
	}
}

func (l *loop) quit() { l.done = true }

// run is the loop. It never blocks in a system call: epoll_wait is
// called with a zero timeout, and when nothing is ready the goroutine
// parks in Go's own poller on the epoll descriptor (readable when one of
// its sockets is ready), with a read deadline at the next timeout. A
// goroutine blocked in epoll_wait instead held its P in a system call:
// sysmon took it back every 20 µs and woke another thread for it, which
// cost more than the connections themselves (a tenth of the relay's
// CPU in runtime.sysmon alone).
func (l *loop) run() {
	var armed time.Time // the read deadline set on l.file, if any
	for !l.done {
		n, err := epollWaitNow(l.epfd, l.events)
		if err != nil && err != unix.EINTR {
			l.s.Log.Error("epoll_wait failed", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if n == 0 && !l.undrained {
			// The deadline stays on the file until changed: a past one
			// would end every later wait at once (a loop spinning idle).
			switch next := l.nextDeadline(); {
			case next.IsZero():
				if !armed.IsZero() {
					l.file.SetReadDeadline(time.Time{})
					armed = time.Time{}
				}
			case armed.IsZero() || next.Before(armed) || !armed.After(time.Now()):
				l.file.SetReadDeadline(next)
				armed = next
			}
			l.waitN, l.polls = 0, 0
			if l.raw.Read(l.waitFn) != nil { // returns at once if ready, or with the deadline's error
				l.wakes++
			}
			l.wakes += max(0, l.polls-1)
			n = l.waitN
		}
		l.now = l.s.now()
		l.mono = time.Now()
		for i := 0; i < n; i++ {
			ev := &l.events[i]
			fd := int(ev.Fd)
			if fd == l.evfd {
				l.runPosted()
				continue
			}
			if fd >= len(l.fds) {
				continue
			}
			sl := &l.fds[fd]
			if sl.gen != uint32(ev.Pad) {
				continue // closed since, and maybe reused
			}
			switch {
			case sl.ln != nil:
				l.accept(sl.ln)
			case sl.c != nil:
				sl.c.event(sl.upstream, ev.Events)
			}
		}
		if l.undrained {
			l.undrained = false
			for _, ls := range l.lns {
				if ls.undrained && ls.retryAt.IsZero() {
					l.accept(ls)
				}
			}
		}
		l.expire()
	}
	l.file.Close() // the epoll descriptor
	l.mu.Lock()
	l.ended = true
	unix.Close(l.evfd)
	l.mu.Unlock()
}

// wait is the Go poller's callback: it reports true (stop waiting) once
// epoll has events, or when a timeout is due.
func (l *loop) wait(uintptr) bool {
	l.polls++
	n, err := epollWaitNow(l.epfd, l.events)
	if err == nil && n > 0 {
		l.waitN = n
		return true
	}
	if l.polls > 1 {
		// Woken, and epoll reports nothing: the socket that made the set
		// readable was ready for another loop too, which took its event
		// (epoll checks readiness again as it reports).
		l.empty++
	}
	next := l.nextDeadline()
	return !next.IsZero() && !next.After(time.Now())
}

// register adds fd to the epoll set (edge-triggered, both ways) for c.
func (l *loop) register(fd int, c *Conn, upstream bool) error {
	for fd >= len(l.fds) {
		l.fds = append(l.fds, make([]slot, max(len(l.fds), 64))...)
	}
	l.gen++
	l.fds[fd] = slot{c: c, gen: l.gen, upstream: upstream}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd), Pad: int32(l.gen)}
	if err := sysEpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.fds[fd] = slot{}
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// release forgets fd and closes it (which takes it out of the epoll set).
func (l *loop) release(fd int) {
	if fd < len(l.fds) {
		l.fds[fd] = slot{}
	}
	sysClose(fd)
}

func (l *loop) addListener(lst *listener, fd int) {
	if l.done || l.s.isClosed() {
		l.listenerGone(lst, fd)
		return
	}
	ls := &lslot{lst: lst, fd: fd}
	l.lns = append(l.lns, ls)
	if err := l.watchListener(ls); err != nil {
		l.dropListener(ls)
		lst.finish(fmt.Errorf("accept on %s: %w", lst.name, err))
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// watchListener puts a listener in the epoll set, edge-triggered. It
// asks for EPOLLEXCLUSIVE, which does not make one loop wake per new
// connection here: the loops park in Go's poller, not in epoll_wait, and
// the empty wake-ups per connection measured the same without the flag
// (a loop that finds nothing to accept parks again). The loop accepts
// until EAGAIN, acceptBatch at a time (ls.undrained carries the
// rest to the next turn).
func (l *loop) watchListener(ls *lslot) error {
	for ls.fd >= len(l.fds) {
		l.fds = append(l.fds, make([]slot, max(len(l.fds), 64))...)
	}
	l.gen++
	l.fds[ls.fd] = slot{ln: ls, gen: l.gen}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET | unix.EPOLLEXCLUSIVE, Fd: int32(ls.fd), Pad: int32(l.gen)}
	if err := sysEpollCtl(l.epfd, unix.EPOLL_CTL_ADD, ls.fd, &ev); err != nil {
		l.fds[ls.fd] = slot{}
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

func (l *loop) dropListeners() {
	for len(l.lns) > 0 {
		l.dropListener(l.lns[0])
	}
}

func (l *loop) dropListener(ls *lslot) {
	for i, x := range l.lns {
		if x == ls {
			l.lns = append(l.lns[:i], l.lns[i+1:]...)
			break
		}
	}
	if ls.retryAt.IsZero() && ls.fd < len(l.fds) {
		l.fds[ls.fd] = slot{}
	}
	l.listenerGone(ls.lst, ls.fd)
}

// listenerGone closes a loop's descriptor of lst; the last one ends Serve.
func (l *loop) listenerGone(lst *listener, fd int) {
	sysClose(fd)
	s := l.s
	s.mu.Lock()
	lst.open--
	last := lst.open == 0
	s.mu.Unlock()
	if last {
		lst.finish(nil)
	}
}

// acceptBatch bounds the connections one wake-up accepts, so that a busy
// listener does not starve the connections the loop carries already.
const acceptBatch = 64

func (l *loop) accept(ls *lslot) {
	var sa sockaddr
	ls.undrained = false
	for i := range acceptBatch + 1 {
		if i == acceptBatch {
			ls.undrained = true // not known to be drained: go on next turn
			l.undrained = true
			return
		}
		fd, err := sysAccept4(ls.fd, &sa)
		if err != nil {
			switch {
			case err == unix.EAGAIN:
				ls.backoff = 0
				return
			case err == unix.EINTR || err == unix.ECONNABORTED || err == unix.EPROTO || err == unix.EPERM:
				continue
			case errclass.Temporary(err):
				l.backOff(ls, err)
				return
			}
			err = fmt.Errorf("accept on %s: %w", ls.lst.name, os.NewSyscallError("accept4", err))
			l.dropListener(ls)
			ls.lst.finish(err)
			return
		}
		ls.backoff = 0
		l.accepted++
		local := ls.lst.addr
		if !local.IsValid() {
			var la sockaddr
			if sysGetsockname(fd, &la) == nil {
				local = la.addrPort()
			}
		}
		l.open(fd, sa.addrPort(), local, nil)
		if l.done {
			return
		}
	}
}

// backOff takes a listener out of the epoll set for a while after a
// temporary error: accepting again at once would fail the same way.
func (l *loop) backOff(ls *lslot, err error) {
	ls.backoff = accept.NextBackoff(ls.backoff)
	ls.retryAt = l.mono.Add(ls.backoff)
	l.fds[ls.fd] = slot{}
	sysEpollCtl(l.epfd, unix.EPOLL_CTL_DEL, ls.fd, nil)
	if ok, suppressed := l.s.limit.Allow(); ok {
		l.s.Log.Warn("accept failed, retrying", "addr", ls.lst.name, "err", os.NewSyscallError("accept4", err),
			"retry_in", ls.backoff, "suppressed", suppressed)
	}
}

// open starts serving an accepted socket.
func (l *loop) open(fd int, peer, local netip.AddrPort, data any) {
	c := &Conn{Data: data, l: l, cfd: fd, sfd: -1, peer: peer, local: local}
	if err := l.register(fd, c, false); err != nil {
		sysClose(fd)
		if ok, suppressed := l.s.limit.Allow(); ok {
			l.s.Log.Warn("connection dropped", "err", err, "suppressed", suppressed)
		}
		return
	}
	l.conns[c] = struct{}{}
	l.s.Handler.Open(c)
}

func (l *loop) abortAll() {
	for c := range l.conns {
		c.finish(Result{Reason: ReasonAborted})
	}
}

// tlist is the FIFO of connections waiting on one timeout duration: every
// deadline in it is later than the one before, so the head is the next to
// expire (a relay has one or two durations: connect, header).
type tlist struct {
	d          time.Duration
	head, tail *Conn
}

func (l *loop) arm(c *Conn, d time.Duration) {
	c.disarm()
	var tl *tlist
	for _, t := range l.timers {
		if t.d == d {
			tl = t
		}
	}
	if tl == nil {
		tl = &tlist{d: d}
		l.timers = append(l.timers, tl)
	}
	c.tl, c.deadline = tl, time.Now().Add(d)
	c.tprev, c.tnext = tl.tail, nil
	if tl.tail != nil {
		tl.tail.tnext = c
	} else {
		tl.head = c
	}
	tl.tail = c
}

func (c *Conn) disarm() {
	tl := c.tl
	if tl == nil {
		return
	}
	if c.tprev != nil {
		c.tprev.tnext = c.tnext
	} else {
		tl.head = c.tnext
	}
	if c.tnext != nil {
		c.tnext.tprev = c.tprev
	} else {
		tl.tail = c.tprev
	}
	c.tl, c.tprev, c.tnext = nil, nil, nil
}

// nextDeadline is the next timeout of a connection or a listener's
// back-off, or zero.
func (l *loop) nextDeadline() time.Time {
	var next time.Time
	for _, t := range l.timers {
		if t.head != nil && (next.IsZero() || t.head.deadline.Before(next)) {
			next = t.head.deadline
		}
	}
	for _, ls := range l.lns {
		if !ls.retryAt.IsZero() && (next.IsZero() || ls.retryAt.Before(next)) {
			next = ls.retryAt
		}
	}
	return next
}

func (l *loop) expire() {
	for _, t := range l.timers {
		for t.head != nil && !t.head.deadline.After(l.mono) {
			c := t.head
			c.disarm()
			c.expired()
		}
	}
	for _, ls := range l.lns {
		if !ls.retryAt.IsZero() && !ls.retryAt.After(l.mono) {
			ls.retryAt = time.Time{}
			if err := l.watchListener(ls); err != nil {
				l.dropListener(ls)
				ls.lst.finish(fmt.Errorf("accept on %s: %w", ls.lst.name, err))
				return
			}
			l.accept(ls)
		}
	}
}
