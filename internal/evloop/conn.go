package evloop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgefleet/edgefleet/internal/errclass"
	"github.com/edgefleet/edgefleet/internal/pipepool"
	"github.com/edgefleet/edgefleet/internal/rawio"
	"github.com/edgefleet/edgefleet/internal/sockopt"
	"golang.org/x/sys/unix"
)

// Conn is one relayed connection: the accepted client socket and, once
// dialled, the upstream one. Its methods are called from its loop (from
// the Handler), except Post and Kill.
type Conn struct {
	// Data is the handler's own state of the connection.
	Data any

	l            *loop
	cfd, sfd     int
	peer, local  netip.AddrPort
	upLocal      netip.AddrPort // the upstream socket's local address, once asked
	upPeer       netip.AddrPort // the address Dial connected to
	state        uint8
	reading      bool               // ReadFirst: the client's bytes go to Received
	pre          []byte             // bytes read from the client and not forwarded yet
	first        *[]byte            // the pooled buffer pre was taken from (Consume reslices pre)
	screen       func([]byte) error // Relay's check of the first client bytes
	up, down     dir
	cerr         error // a client read error met before Relay
	dialStarted  time.Time
	dialTook     time.Duration // how long the last Dial took, once it ended
	dialOpts     *DialOptions
	upOptsSet    uint8 // optNoDelay, optKeepalive: set on the upstream socket already
	writes       int   // writes to the upstream socket so far
	clientPolled bool  // an event of the client socket came (its readiness is known)

	tl           *tlist // the timeout list c waits in, if any
	tprev, tnext *Conn
	deadline     time.Time
}

// Connection states.
const (
	stOpen    uint8 = iota // accepted; nothing asked yet, or ReadFirst
	stDialing              // connect in progress
	stDialed               // connected, waiting for Relay or Close
	stRelay                // bytes flow
	stClosed
)

// The upstream socket's options are set when they first matter:
// TCP_NODELAY before its second write (Nagle can only hold back a write
// that follows one not acknowledged yet), keepalive once the connection
// has lived keepaliveAfter (keepalive only ever speaks after its idle
// time, 15 s by default). A short connection pays neither: five
// setsockopt calls fewer per connection than setting them at connect.
const (
	optNoDelay uint8 = 1 << iota
	optKeepalive
)

// keepaliveAfter is how long a relayed connection lives before its
// upstream socket gets keepalive.
const keepaliveAfter = time.Second

// upWrite is called before every write to the upstream socket.
func (c *Conn) upWrite() {
	c.writes++
	if c.writes == 2 && c.upOptsSet&optNoDelay == 0 && c.dialOpts != nil && c.dialOpts.NoDelay {
		c.upOptsSet |= optNoDelay
		sysSetsockoptInt(c.sfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
}

// setKeepalive gives the upstream socket its keepalive options.
func (c *Conn) setKeepalive() {
	if c.upOptsSet&optKeepalive != 0 || c.dialOpts == nil || c.dialOpts.Keepalive.Idle <= 0 || c.sfd < 0 {
		return
	}
	c.upOptsSet |= optKeepalive
	c.dialOpts.Keepalive.Each(func(level, opt, value int) { sysSetsockoptInt(c.sfd, level, opt, value) })
}

// dir is one direction of the copy.
type dir struct {
	ready   bool   // the source may have bytes (or EOF) to read
	hup     bool   // the source reported its peer's FIN or an error: read on to the end
	blocked bool   // the destination's buffer is full: wait for it to drain
	eof     bool   // the source reached EOF
	shut    bool   // the destination's write half is shut
	bulk    bool   // the last read filled the buffer: splice the next
	pend    []byte // read and not written yet
	pbuf    *[bufSize]byte
	p       *pipepool.Pipe
	inPipe  int
	n       int64
}

// Peer is the client's address (IPv4-mapped addresses unmapped).
func (c *Conn) Peer() netip.AddrPort { return c.peer }

// Local is the address the client connected to.
func (c *Conn) Local() netip.AddrPort { return c.local }

// UpstreamLocal is the local address of the upstream socket, once
// connected (the port the upstream sees the connection come from).
func (c *Conn) UpstreamLocal() netip.AddrPort {
	if !c.upLocal.IsValid() && c.sfd >= 0 {
		var sa sockaddr
		if sysGetsockname(c.sfd, &sa) == nil {
			c.upLocal = sa.addrPort()
		}
	}
	return c.upLocal
}

// UpstreamPeer is the address the last Dial connected to.
func (c *Conn) UpstreamPeer() netip.AddrPort { return c.upPeer }

// Now is the loop's clock, read once per wake-up.
func (c *Conn) Now() time.Time { return c.l.now }

// Open reports whether c has not ended yet.
func (c *Conn) Open() bool { return c.state != stClosed }

// Post runs f on c in c's loop, unless c has ended by then. It may be
// called from any goroutine.
func (c *Conn) Post(f func(c *Conn)) {
	c.l.post(func() {
		if c.state != stClosed {
			f(c)
		}
	})
}

// Kill closes c from any goroutine; Closed sees ReasonKilled.
func (c *Conn) Kill() {
	c.Post(func(c *Conn) { c.finish(Result{Reason: ReasonKilled}) })
}

// Close ends c before or instead of relaying; Closed is called at once
// with reason and err.
func (c *Conn) Close(reason string, err error) {
	if c.state == stClosed {
		return
	}
	c.finish(Result{Up: c.up.n, Down: c.down.n, Reason: reason, Err: err})
}

// ReadFirst hands the client's bytes to Handler.Received as they come, for
// at most d; at most MaxFirst bytes are read (Received then sees a full
// buffer and decides). They go into a buffer of firstSmall bytes, which
// every PROXY header and most ClientHellos fit. Once it is full, Received
// sees it whole; only when it has not decided then (the connection is
// still reading: not closed, not dialling) does the buffer grow, once, to
// MaxFirst, and the read go on: a client costs the larger buffer only
// when its first firstSmall bytes are a prefix of something that large.
// At most Server.MaxGrown connections of a loop hold the larger buffer at
// once; past them, Received gets the full small buffer and ErrGrowLimit.
func (c *Conn) ReadFirst(d time.Duration) {
	c.reading = true
	c.l.arm(c, d)
	if c.up.ready {
		c.readFirst()
	}
}

// What ReadFirst buffers: firstSmall at first, MaxFirst at most (one
// whole TLS record: a ClientHello resuming a session whose ticket holds a
// large client certificate chain, an RSA-4096 one of 4.6 KB, is larger
// than firstSmall). The first write (the header and these bytes) still
// fits in the loop's buffer, headroom+bufSize.
const (
	firstSmall = headroom
	MaxFirst   = 16384 + 5
)

// Consume drops the first n bytes read in ReadFirst mode (a header): the
// rest go to the upstream first when the copy starts.
func (c *Conn) Consume(n int) {
	c.pre = c.pre[:copy(c.pre, c.pre[n:])] // in place: room for more reads
}

// DialOptions is how Dial makes the upstream socket.
type DialOptions struct {
	Timeout   time.Duration     // connect timeout; 0: none
	Source    netip.Addr        // the local address to connect from; zero: the kernel picks
	NoDelay   bool              // TCP_NODELAY
	Keepalive sockopt.Keepalive // the zero value: keepalive off (the kernel default)
	// Sent, when set, is called as soon as the connect is under way, with
	// UpstreamLocal known (e.g. to record the socket before the
	// connection can come back to a listener of this process). It may
	// Close c.
	Sent func(c *Conn)
}

// Dial connects the upstream socket to addr; Handler.Dialed follows (at
// once when the connect failed at once).
func (c *Conn) Dial(addr netip.AddrPort, o *DialOptions) {
	if c.state == stClosed {
		return
	}
	c.reading = false
	c.disarm()
	c.state = stDialing
	c.dialStarted, c.dialTook = c.l.s.now(), 0
	c.upPeer = addr
	if c.sfd >= 0 {
		c.l.release(c.sfd)
		c.sfd, c.upLocal = -1, netip.AddrPort{}
	}
	fd, v6, err := upSocket(addr, o.Source)
	if err != nil {
		c.dialFailed(err)
		return
	}
	// TCP_NODELAY and keepalive are set when they first matter (see
	// optNoDelay): most relayed connections are over before either would.
	c.dialOpts = o
	c.upOptsSet = 0
	var sa sockaddr
	n := sa.set(netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()), v6)
	err = sysConnect(fd, &sa, n)
	if err != nil && err != unix.EINPROGRESS {
		sysClose(fd)
		c.dialFailed(os.NewSyscallError("connect", err))
		return
	}
	if rerr := c.l.register(fd, c, true); rerr != nil {
		sysClose(fd)
		c.dialFailed(rerr)
		return
	}
	c.sfd = fd
	if o.Sent != nil {
		if o.Sent(c); c.state == stClosed {
			return
		}
	}
	if err == nil {
		c.connected(nil)
		return
	}
	// On loopback the handshake is usually over by the time connect
	// returns: a second connect says so (0 or EISCONN) at the price of the
	// SO_ERROR check it replaces, and the copy starts now rather than
	// on the next turn of the loop.
	switch err := sysConnect(fd, &sa, n); err {
	case nil, unix.EISCONN: // Linux says 0 once connected
		c.connected(nil)
		return
	case unix.EALREADY, unix.EINPROGRESS, unix.EINTR:
	default:
		c.connected(err)
		return
	}
	if o.Timeout > 0 {
		c.l.arm(c, o.Timeout)
	}
	// the connect's outcome comes as an event (EPOLLOUT, or EPOLLERR)
}

// upSocket opens the upstream socket for a connect to addr, an AF_INET6
// one (v6) when addr or source is an IPv6 address, and binds it to source
// when that is set.
func upSocket(addr netip.AddrPort, source netip.Addr) (fd int, v6 bool, err error) {
	fam := unix.AF_INET
	if !addr.Addr().Unmap().Is4() || source.IsValid() && !source.Unmap().Is4() {
		fam, v6 = unix.AF_INET6, true
	}
	if fd, err = sysSocket(fam); err != nil {
		return -1, v6, os.NewSyscallError("socket", err)
	}
	if source.IsValid() {
		// The port is chosen by connect, not by bind: bind would search
		// the whole range for a port free for every destination.
		sysSetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
		var sa sockaddr
		n := sa.set(netip.AddrPortFrom(source.Unmap(), 0), v6)
		if err := sysBind(fd, &sa, n); err != nil {
			sysClose(fd)
			return -1, v6, os.NewSyscallError("bind", err)
		}
	}
	return fd, v6, nil
}

// DialDuration is how long the last Dial took, from its start to its
// outcome, both read from the Server's clock at the moment (never the
// loop's reading of the wake-up, which is earlier than a connect that
// starts and ends within one turn); never negative, even with a clock
// that steps back.
func (c *Conn) DialDuration() time.Duration { return c.dialTook }

// dialEnd records the end of a Dial.
func (c *Conn) dialEnd() {
	c.dialTook = max(0, c.l.s.now().Sub(c.dialStarted))
}

func (c *Conn) dialFailed(err error) {
	c.dialEnd()
	c.state = stOpen
	c.l.s.Handler.Dialed(c, err)
}

// connected ends a connect: err nil means it succeeded.
func (c *Conn) connected(err error) {
	if err != nil {
		c.disarm()
		c.l.release(c.sfd)
		c.sfd = -1
		c.dialFailed(os.NewSyscallError("connect", err))
		return
	}
	c.disarm()
	c.dialEnd()
	c.state = stDialed
	c.l.s.Handler.Dialed(c, nil)
}

// expired is a timer's end.
func (c *Conn) expired() {
	switch {
	case c.state == stDialing:
		c.l.release(c.sfd)
		c.sfd = -1
		c.dialFailed(ErrTimeout)
	case c.state == stRelay:
		c.setKeepalive()
	case c.state == stOpen && c.reading:
		c.reading = false
		c.l.s.Handler.Received(c, c.pre, ErrTimeout)
	}
}

// event is epoll's news of one of c's sockets.
func (c *Conn) event(upstream bool, ev uint32) {
	in := ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	out := ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0
	hup := ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	src, dst := &c.up, &c.down // the directions c's client socket reads for and writes for
	if upstream {
		src, dst = &c.down, &c.up
	} else {
		c.clientPolled = true
	}
	if in {
		src.ready = true
		src.hup = src.hup || hup
	}
	if out {
		dst.blocked = false
	}
	switch c.state {
	case stOpen:
		if !upstream && c.reading && in {
			c.readFirst()
		}
	case stDialing:
		switch {
		case !upstream:
		case ev&(unix.EPOLLERR|unix.EPOLLHUP) != 0:
			err := sysSoError(c.sfd)
			if err == nil {
				err = unix.ECONNRESET
			}
			c.connected(err)
		case out: // writable without an error: connected
			c.connected(nil)
		}
	case stRelay:
		c.pump()
		if c.state == stRelay && ev&unix.EPOLLERR != 0 {
			// The socket has failed (a reset), and the copy moved what it
			// could: a direction still waiting for the other side's room
			// would never read the error (the other side may never read
			// again), so it ends the connection now.
			fd, reason := c.cfd, ReasonClientError
			if upstream {
				fd, reason = c.sfd, ReasonServerError
			}
			if err := sysSoError(fd); err != nil {
				c.finish(Result{Reason: reason, Err: os.NewSyscallError("socket", err)})
			}
		}
	}
}

// firstBufs and bigFirstBufs hold ReadFirst's bytes until Relay forwards
// them.
var (
	firstBufs    = sync.Pool{New: func() any { b := make([]byte, 0, firstSmall); return &b }}
	bigFirstBufs = sync.Pool{New: func() any { b := make([]byte, 0, MaxFirst); return &b }}
)

func (c *Conn) readFirst() {
	var err error
	got := false
	for c.up.ready && !c.up.eof {
		if c.pre == nil {
			c.takePre()
		}
		if len(c.pre) == cap(c.pre) {
			if cap(c.pre) >= MaxFirst {
				break // the handler decides what a full buffer means
			}
			if got {
				// The handler decides on the full small buffer first: most
				// refusals need no more bytes.
				got = false
				if c.l.s.Handler.Received(c, c.pre, nil); c.state != stOpen || !c.reading {
					return
				}
				if len(c.pre) < cap(c.pre) {
					continue // consumed: room again
				}
			}
			if !c.l.mayGrow() {
				err = ErrGrowLimit
				break
			}
			// Undecided: the socket is edge-triggered, so the rest still
			// in it is read now, into the larger buffer.
			c.growPre()
		}
		n, rerr := rawio.ReadNow(c.cfd, c.pre[len(c.pre):cap(c.pre)])
		switch {
		case rerr == unix.EINTR:
			continue
		case rerr == unix.EAGAIN:
			c.up.ready = false
		case rerr != nil:
			// Kept for Relay: the error's edge is gone, no event would
			// report it again.
			err = os.NewSyscallError("read", rerr)
			c.up.ready = false
			c.cerr = err
		case n == 0:
			c.up.eof = true
			err = io.EOF
		default:
			c.pre = c.pre[:len(c.pre)+n]
			got = true
			if len(c.pre) < cap(c.pre) && !c.up.hup {
				c.up.ready = false
			}
			continue
		}
		break
	}
	if err != nil {
		c.reading = false
		c.disarm()
	}
	if got || err != nil || len(c.pre) == MaxFirst {
		c.l.s.Handler.Received(c, c.pre, err)
	}
}

// takePre sets pre to an empty pooled buffer.
func (c *Conn) takePre() {
	if c.first == nil {
		c.first = firstBufs.Get().(*[]byte)
	}
	c.pre = (*c.first)[:0]
}

// growPre moves pre, full, into a MaxFirst buffer (mayGrow counted it).
func (c *Conn) growPre() {
	big := bigFirstBufs.Get().(*[]byte)
	*big = append((*big)[:0], c.pre...)
	c.putPre()
	c.first, c.pre = big, *big
}

// putPre gives pre's buffer back (pre may have been resliced by Consume
// or grown past it by append: the pooled one is kept in first).
func (c *Conn) putPre() {
	if c.first != nil {
		if cap(*c.first) >= MaxFirst {
			c.l.grown--
			bigFirstBufs.Put(c.first)
		} else {
			firstBufs.Put(c.first)
		}
		c.first = nil
	}
	c.pre = nil
}

// Relay starts the copy: prefix (a PROXY header), then the client's bytes
// read so far, go to the upstream in one write. When screen is not nil,
// the client's first bytes must pass it before any of them is forwarded:
// it returns nil to forward them (screening ends), ErrMore to wait for
// more, or another error to refuse the client (ReasonClientError).
func (c *Conn) Relay(prefix []byte, screen func([]byte) error) {
	if c.state != stDialed {
		return
	}
	c.state = stRelay
	l := c.l
	if c.dialOpts != nil && c.dialOpts.Keepalive.Idle > 0 {
		l.arm(c, keepaliveAfter)
	}
	out := append(l.buf[:0], prefix...)
	if len(c.pre) > 0 {
		out = append(out, c.pre...)
		c.putPre()
	} else if (c.up.ready || !c.clientPolled) && !c.up.eof && c.cerr == nil {
		// The client's first bytes have usually arrived during the
		// connect: read them straight behind the header (also when the
		// client socket's first event is still to come: the connect
		// may be over before the loop has polled).
		n, err := rawio.ReadNow(c.cfd, l.buf[len(out):cap(l.buf)])
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			c.up.ready = false
		case err != nil:
			c.cerr = os.NewSyscallError("read", err)
		case n == 0:
			c.up.eof = true
		default:
			if len(out)+n < cap(l.buf) && !c.up.hup {
				c.up.ready = false
			}
			out = out[:len(out)+n]
		}
	}
	if c.cerr != nil {
		c.finish(Result{Reason: ReasonClientError, Err: c.cerr})
		return
	}
	first := out[len(prefix):]
	if screen != nil && len(first) > 0 {
		switch err := screen(first); err {
		case nil:
			screen = nil
		case ErrMore:
			c.takePre()
			c.pre = append(c.pre, first...)
			out, first = out[:len(prefix)], nil
		default:
			c.finish(Result{Reason: ReasonClientError, Err: err})
			return
		}
	}
	c.screen = screen
	c.up.n += int64(len(first))
	if len(out) > 0 && !c.write(&c.up, c.sfd, out) {
		return
	}
	c.pump()
}

// ErrMore is what a Relay screen returns when the bytes so far are too
// few to decide.
var ErrMore = errors.New("evloop: more bytes needed")

// write sends b to fd for direction d; what the socket does not take now
// waits in d.pend. It reports false when c ended (a write error).
//
// Only EAGAIN means "wait for EPOLLOUT": the kernel then has set
// SOCK_NOSPACE and wakes the epoll set when space frees. A short write
// or splice may also come from a signal (the Go runtime's preemption
// signal interrupts a splice between two buffers) with the socket still
// writable, and no EPOLLOUT edge would ever follow: the rest is retried
// at once instead, and a second call says EAGAIN when the buffer is
// really full.
func (c *Conn) write(d *dir, fd int, b []byte) bool {
	if d == &c.up {
		c.upWrite()
	}
	m, err := rawio.WriteNow(fd, b)
	switch {
	case err == unix.EAGAIN:
		m = 0
		d.blocked = true
	case err == unix.EINTR:
		m = 0
	case err != nil:
		c.writeFailed(d, err)
		return false
	}
	if m < len(b) {
		if d.pbuf == nil {
			d.pbuf = pbufs.Get().(*[bufSize]byte)
		}
		rest := b[m:]
		if len(rest) > bufSize {
			// only a first write (header plus headroom) can be larger
			big := make([]byte, len(rest))
			copy(big, rest)
			d.pend = big
		} else {
			d.pend = d.pbuf[:copy(d.pbuf[:], rest)]
		}
	}
	return true
}

var pbufs = sync.Pool{New: func() any { return new([bufSize]byte) }}

func (c *Conn) writeFailed(d *dir, err error) {
	reason := ReasonServerError
	if d == &c.down {
		reason = ReasonClientError
	}
	c.finish(Result{Reason: reason, Err: os.NewSyscallError("write", err)})
}

func (c *Conn) readFailed(d *dir, err error) {
	reason := ReasonClientError
	if d == &c.down {
		reason = ReasonServerError
	}
	c.finish(Result{Reason: reason, Err: os.NewSyscallError("read", err)})
}

// pump moves what can move both ways, then ends c when both directions
// are done.
func (c *Conn) pump() {
	if !c.move(&c.up, c.cfd, c.sfd) {
		return
	}
	if !c.move(&c.down, c.sfd, c.cfd) {
		return
	}
	if c.up.shut && c.down.shut {
		c.finish(Result{Reason: ReasonEOF})
	}
}

// move runs direction d (src to dst) until it must wait. Each turn
// first writes out what d holds, then takes the one step d's state
// calls for: the end of the stream, a drained source, a splice (bulk)
// or a read through the loop's buffer. It reports false when c ended.
func (c *Conn) move(d *dir, src, dst int) bool {
	for {
		if wait, ok := c.flushOut(d, dst); !ok || wait {
			return ok
		}
		ok := true
		switch {
		case d.eof && c.screening(d):
			// A prefix of what the screen looks for, then EOF: it goes
			// as it came.
			ok = c.releaseHeld()
		case d.eof:
			c.halfClose(d, dst)
			return true
		case !d.ready:
			c.putPipe(d) // drained: the pipe goes back to the pool
			return true
		case d.bulk:
			ok = c.spliceIn(d, src)
		default:
			ok = c.copyThrough(d, src, dst)
		}
		if !ok {
			return false
		}
	}
}

// screening reports whether d's bytes still go to Relay's screen
// before any of them is forwarded.
func (c *Conn) screening(d *dir) bool { return d == &c.up && c.screen != nil }

// releaseHeld ends screening: the client's bytes held for the screen go
// to the upstream. It reports false when c ended.
func (c *Conn) releaseHeld() bool {
	c.screen = nil
	held := c.pre
	c.up.n += int64(len(held))
	ok := len(held) == 0 || c.write(&c.up, c.sfd, held)
	c.putPre()
	return ok
}

// halfClose ends direction d after its source's EOF: d's pipe goes
// back, and dst's write half is shut, unless the other direction is
// done already (the close that follows sends the FIN then).
func (c *Conn) halfClose(d *dir, dst int) {
	if d.shut {
		return
	}
	d.shut = true
	c.putPipe(d)
	if !c.other(d).shut {
		sysShutdown(dst, unix.SHUT_WR)
	}
}

// other is the direction opposite d.
func (c *Conn) other(d *dir) *dir {
	if d == &c.up {
		return &c.down
	}
	return &c.up
}

// spliceIn moves what src has into d's pipe. Without a pipe to be had
// (over Server.MaxPipes, or out of descriptors) d copies through the
// buffer instead. It reports false when c ended.
func (c *Conn) spliceIn(d *dir, src int) bool {
	if d.p == nil && !c.takePipe(d) {
		d.bulk = false
		return true
	}
	m, err := sysSplice(src, d.p.W, pipepool.Chunk)
	switch {
	case err == unix.EINTR:
	case err == unix.EAGAIN:
		d.ready = false
	case err != nil:
		c.readFailed(d, err)
		return false
	case m == 0:
		d.eof = true
	default:
		d.inPipe += m
		d.n += int64(m)
		if m < bufSize {
			// A small burst: the next one is copied through the buffer
			// again (splice-auto), until one fills it.
			d.bulk = false
		}
	}
	return true
}

// takePipe gives d a pipe from the pool, within the Server's budget. It
// reports false when there is none to be had.
func (c *Conn) takePipe(d *dir) bool {
	if !c.l.s.takePipe() {
		return false
	}
	p, err := pipepool.Get()
	if err != nil {
		c.l.s.pipeGone()
		return false
	}
	d.p = p
	return true
}

// copyThrough reads what src has into the loop's buffer and writes it
// to dst (or hands it to the screen); a read that fills the buffer
// makes d bulk. It reports false when c ended.
func (c *Conn) copyThrough(d *dir, src, dst int) bool {
	buf := c.l.buf[:bufSize]
	m, err := rawio.ReadNow(src, buf)
	switch {
	case err == unix.EINTR:
		return true
	case err == unix.EAGAIN:
		d.ready = false
		return true
	case err != nil:
		c.readFailed(d, err)
		return false
	case m == 0:
		d.eof = true
		return true
	}
	if m < len(buf) {
		if !d.hup {
			// A short read drained the socket: the next byte or FIN is
			// a new edge.
			d.ready = false
		}
	} else {
		d.bulk = true
	}
	b := buf[:m]
	if c.screening(d) {
		return c.screenMore(b)
	}
	d.n += int64(m)
	return c.write(d, dst, b)
}

// flushOut writes what d holds — bytes a write did not take, or a
// pipe's — to dst. wait reports that dst is full (EPOLLOUT will come);
// ok false that c ended.
func (c *Conn) flushOut(d *dir, dst int) (wait, ok bool) {
	for len(d.pend) > 0 || d.inPipe > 0 {
		if d.blocked {
			return true, true
		}
		if d == &c.up {
			c.upWrite()
		}
		var m int
		var err error
		if len(d.pend) > 0 {
			m, err = rawio.WriteNow(dst, d.pend)
		} else {
			m, err = sysSplice(d.p.R, dst, d.inPipe)
		}
		switch {
		case err == unix.EAGAIN:
			d.blocked = true
			return true, true
		case err == unix.EINTR:
			continue
		case err != nil:
			c.writeFailed(d, err)
			return false, false
		}
		// A short write is retried at once (see write).
		if len(d.pend) > 0 {
			if d.pend = d.pend[m:]; len(d.pend) == 0 {
				d.pend = nil
				pbufs.Put(d.pbuf)
				d.pbuf = nil
			}
		} else {
			d.inPipe -= m
		}
	}
	return false, true
}

// putPipe gives d's pipe (drained) back to the pool and to the budget.
func (c *Conn) putPipe(d *dir) {
	if d.p == nil {
		return
	}
	pipepool.Put(d.p)
	d.p = nil
	c.l.s.pipeGone()
}

// screenMore adds b to the client's bytes held for the screen, and
// forwards them once they pass. It reports false when c ended.
func (c *Conn) screenMore(b []byte) bool {
	if c.pre == nil {
		c.takePre()
	}
	c.pre = append(c.pre, b...)
	switch err := c.screen(c.pre); err {
	case nil:
		return c.releaseHeld()
	case ErrMore:
		if len(c.pre) >= firstSmall {
			c.finish(Result{Reason: ReasonClientError, Err: errScreenTooLong})
			return false
		}
		return true
	default:
		c.finish(Result{Reason: ReasonClientError, Err: err})
		return false
	}
}

var errScreenTooLong = errorString("evloop: screen undecided after the first bytes")

type errorString string

func (e errorString) Error() string { return string(e) }

// finish closes both sockets, gives back what c held and tells the
// handler.
func (c *Conn) finish(res Result) {
	if c.state == stClosed {
		return
	}
	c.state = stClosed
	c.disarm()
	l := c.l
	l.release(c.cfd)
	if c.sfd >= 0 {
		l.release(c.sfd)
	}
	for _, d := range []*dir{&c.up, &c.down} {
		if d.p != nil && d.inPipe > 0 {
			d.p.Close() // it holds bytes: not for the pool
			d.p = nil
			l.s.pipeGone()
		}
		c.putPipe(d)
		if d.pbuf != nil {
			pbufs.Put(d.pbuf)
			d.pbuf, d.pend = nil, nil
		}
	}
	c.putPre()
	delete(l.conns, c)
	if res.Up == 0 {
		res.Up = c.up.n
	}
	if res.Down == 0 {
		res.Down = c.down.n
	}
	l.s.Handler.Closed(c, res)
}

// withShortage adds to a failed lookup's error the local shortage one of
// its queries met. A *net.DNSError stays one (callers copy it to rename
// the host it names): the shortage goes into its text and its Unwrap, and
// it is no longer "not found" but temporary.
func withShortage(err, short error) error {
	var de *net.DNSError
	if !errors.As(err, &de) {
		return fmt.Errorf("%w (a query's socket: %w)", err, short)
	}
	cp := *de
	cp.Err += " (a query's socket: " + short.Error() + ")"
	cp.UnwrapErr = errors.Join(de.Unwrap(), short)
	cp.IsNotFound, cp.IsTemporary = false, true
	return &cp
}

// resolver is Resolve's: Go's (the binaries are built without cgo), one
// for the process, so that concurrent lookups of one name are merged into
// one (a resolver merges only its own), dialling through watchDial.
var resolver = &net.Resolver{PreferGo: true, Dial: watchDial}

// shortages counts the query sockets watchDial could not open for lack
// of local resources; lastShortage is the error of the latest (stored
// before the count moves).
var (
	shortages    atomic.Uint64
	lastShortage atomic.Pointer[error]
)

// watchDial dials a query's server as net.DefaultResolver would (its Dial
// when it has one, read at each call) and records a socket that could not
// be opened for lack of local resources: socket(2)'s EMFILE, ENFILE,
// ENOBUFS or ENOMEM. Only socket(2)'s: connect's EADDRNOTAVAIL to a
// listed server this host has no route or address for (nameserver ::1
// without IPv6, say) is that server's configuration, the same at every
// lookup, not a shortage.
func watchDial(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	var err error
	if dial := net.DefaultResolver.Dial; dial != nil {
		c, err = dial(ctx, network, address)
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
	}
	var se *os.SyscallError
	if err != nil && errors.As(err, &se) && se.Syscall == "socket" && errclass.LocalResources(se) {
		lastShortage.Store(&err)
		shortages.Add(1)
	}
	return c, err
}

// Resolve looks up a host:port's first address (IPv4-mapped unmapped),
// for a handler that dials a name: off the loop, then Post back to Dial.
// When the lookup failed and a query socket could not be opened for lack
// of local resources meanwhile (watchDial), that error is wrapped into the
// one returned, whatever the resolver concluded from the queries it could
// send ("no such host" from a search-list name, say), so that a caller
// does not read this host's shortage as the name's failure. The shortage
// may have been another lookup's: descriptors are the process's, and a
// failure during a shortage is not held against the name.
func Resolve(ctx context.Context, addr string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	before := shortages.Load()
	ips, err := resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		if shortages.Load() != before && !errclass.LocalResources(err) {
			err = withShortage(err, *lastShortage.Load())
		}
		return netip.AddrPort{}, err
	}
	if len(ips) == 0 {
		return netip.AddrPort{}, &net.DNSError{Err: "no address", Name: host, IsNotFound: true}
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(p)), nil
}
