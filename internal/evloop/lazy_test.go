package evloop

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/sockopt"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"golang.org/x/sys/unix"
)

// inLoop runs f on c in c's loop and waits for it (a hang guard only).
func inLoop(t *testing.T, c *Conn, f func(c *Conn)) {
	t.Helper()
	done := make(chan struct{})
	c.Post(func(c *Conn) { f(c); close(done) })
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the loop did not run a posted function within 20 s (or the connection ended)")
	}
}

func sockInt(t *testing.T, fd, level, opt int) int {
	t.Helper()
	v, err := unix.GetsockoptInt(fd, level, opt)
	if err != nil {
		t.Errorf("getsockopt(%d, %d, %d): %v", fd, level, opt, err)
	}
	return v
}

// dialedRelay relays every connection to target with opts; each Conn,
// once Relay was called, goes to conns, after check ran on it in the
// loop (the state Relay left, before any event or timer).
type dialedRelay struct {
	target netip.AddrPort
	opts   DialOptions
	prefix []byte
	check  func(c *Conn)
	conns  chan *Conn
	start  time.Time // when the last Relay was called (before it armed any timer)
}

func (r *dialedRelay) Open(c *Conn)                  { c.Dial(r.target, &r.opts) }
func (r *dialedRelay) Received(*Conn, []byte, error) {}
func (r *dialedRelay) Closed(*Conn, Result)          {}
func (r *dialedRelay) Dialed(c *Conn, err error) {
	if err != nil {
		c.Close("dial", err)
		return
	}
	r.start = time.Now()
	c.Relay(r.prefix, nil)
	if r.check != nil {
		r.check(c)
	}
	r.conns <- c
}

// connect serves r and connects a client through it; c is the relayed
// connection, once Relay ran.
func (r *dialedRelay) connect(t *testing.T) (client net.Conn, c *Conn) {
	t.Helper()
	_, addr := serve(t, r)
	client, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	select {
	case c = <-r.conns:
	case <-time.After(20 * time.Second):
		t.Fatal("no relayed connection within 20 s")
	}
	return client, c
}

// TestNoDelayBeforeSecondWrite: with DialOptions.NoDelay the upstream
// socket gets TCP_NODELAY before its second write, not at connect (one
// write cannot be held back by Nagle) — and it does get it.
func TestNoDelayBeforeSecondWrite(t *testing.T) {
	got := make(chan string, 1)
	up := upstream(t, func(c net.Conn) {
		b := make([]byte, 2)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		io.ReadFull(c, b)
		got <- string(b)
		io.Copy(io.Discard, c)
	})
	afterFirst := -1
	r := &dialedRelay{target: netip.MustParseAddrPort(up), opts: DialOptions{Timeout: 20 * time.Second, NoDelay: true},
		prefix: []byte("P"), conns: make(chan *Conn, 1)}
	r.check = func(c *Conn) { afterFirst = sockInt(t, c.sfd, unix.IPPROTO_TCP, unix.TCP_NODELAY) }
	client, c := r.connect(t) // the header went in the first write; the client has sent nothing
	if afterFirst != 0 {
		t.Errorf("TCP_NODELAY is %d after the first write, want 0 (set lazily)", afterFirst)
	}
	io.WriteString(client, "x")
	if s := <-got; s != "Px" {
		t.Fatalf("upstream got %q, want Px", s)
	}
	inLoop(t, c, func(c *Conn) {
		if v := sockInt(t, c.sfd, unix.IPPROTO_TCP, unix.TCP_NODELAY); v != 1 {
			t.Errorf("TCP_NODELAY is %d after the second write, want 1", v)
		}
	})
}

// TestKeepaliveAfterASecond: the upstream socket gets the keepalive
// options of DialOptions once the relayed connection has lived
// keepaliveAfter, not at connect.
func TestKeepaliveAfterASecond(t *testing.T) {
	up := upstream(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	ka := sockopt.Keepalive{Idle: 7 * time.Second, Interval: 3 * time.Second, Count: 4}
	atRelay := -1
	r := &dialedRelay{target: netip.MustParseAddrPort(up), opts: DialOptions{Timeout: 20 * time.Second, Keepalive: ka},
		conns: make(chan *Conn, 1)}
	r.check = func(c *Conn) { atRelay = sockInt(t, c.sfd, unix.SOL_SOCKET, unix.SO_KEEPALIVE) }
	_, c := r.connect(t)
	if atRelay != 0 {
		t.Errorf("SO_KEEPALIVE is %d when the relay starts, want 0 (set after %v)", atRelay, keepaliveAfter)
	}
	var on bool
	var at time.Time
	for deadline := time.Now().Add(20 * time.Second); !on; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the upstream socket has no keepalive 20 s after the relay started")
		}
		inLoop(t, c, func(c *Conn) {
			if on = sockInt(t, c.sfd, unix.SOL_SOCKET, unix.SO_KEEPALIVE) == 1; !on {
				return
			}
			at = time.Now()
			for _, o := range []struct{ opt, want int }{
				{unix.TCP_KEEPIDLE, 7}, {unix.TCP_KEEPINTVL, 3}, {unix.TCP_KEEPCNT, 4},
			} {
				if v := sockInt(t, c.sfd, unix.IPPROTO_TCP, o.opt); v != o.want {
					t.Errorf("TCP option %d is %d, want %d", o.opt, v, o.want)
				}
			}
		})
	}
	if d := at.Sub(r.start); d < keepaliveAfter {
		t.Errorf("keepalive set %v after the relay started, before %v", d, keepaliveAfter)
	}
}

// TestSpliceAutoBackToReadWrite: a direction that filled the buffer
// moves by splice (bytes wait in its pipe while the client does not
// read); the first burst smaller than the buffer switches it back to
// read and write.
func TestSpliceAutoBackToReadWrite(t *testing.T) {
	const bulk = 32 << 20
	small := make(chan struct{})
	up := upstream(t, func(c net.Conn) {
		c.SetWriteDeadline(time.Now().Add(60 * time.Second))
		c.Write(make([]byte, bulk))
		<-small
		c.Write([]byte("x"))
		io.Copy(io.Discard, c)
	})
	r := &dialedRelay{target: netip.MustParseAddrPort(up), opts: DialOptions{Timeout: 20 * time.Second},
		conns: make(chan *Conn, 1)}
	client, c := r.connect(t)
	spliced := false
	for deadline := time.Now().Add(20 * time.Second); !spliced; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no bytes waited in the download's pipe in 20 s: bulk data did not go through splice")
		}
		inLoop(t, c, func(c *Conn) { spliced = c.down.p != nil && c.down.inPipe > 0 })
	}
	client.SetReadDeadline(time.Now().Add(60 * time.Second))
	if n, err := io.CopyN(io.Discard, client, bulk); err != nil {
		t.Fatalf("client read %d of %d bytes: %v", n, bulk, err)
	}
	close(small)
	b := make([]byte, 1)
	if _, err := io.ReadFull(client, b); err != nil || b[0] != 'x' {
		t.Fatalf("client read %q, %v after the bulk data, want x", b, err)
	}
	inLoop(t, c, func(c *Conn) {
		if c.down.bulk {
			t.Error("after a 1-byte burst the download still splices, want read and write")
		}
	})
}

// TestAcceptBatchCarryOver: connections queued beyond one accept batch
// are accepted on the next turns of the loop, with no new connection to
// wake it (the listener is edge-triggered: one edge for the whole burst).
func TestAcceptBatchCarryOver(t *testing.T) {
	const burst = 5*acceptBatch + 7
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The whole burst waits in the accept queue before the loop watches
	// the listener.
	for range burst {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	var mu sync.Mutex
	opened := 0
	h := &funcHandler{open: func(c *Conn) {
		mu.Lock()
		opened++
		mu.Unlock()
		c.Close("test", nil)
	}}
	s := &Server{Handler: h, Loops: 1}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	defer func() { s.Stop(); <-served }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := opened
		mu.Unlock()
		if n == burst {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d queued connections accepted within 20 s", n, burst)
		}
	}
}

// funcHandler is a Handler made of funcs; a nil one does nothing.
type funcHandler struct {
	open     func(c *Conn)
	received func(c *Conn, b []byte, err error)
	dialed   func(c *Conn, err error)
}

func (h *funcHandler) Open(c *Conn) {
	if h.open != nil {
		h.open(c)
	}
}

func (h *funcHandler) Received(c *Conn, b []byte, err error) {
	if h.received != nil {
		h.received(c, b, err)
	}
}

func (h *funcHandler) Dialed(c *Conn, err error) {
	if h.dialed != nil {
		h.dialed(c, err)
	}
}

func (h *funcHandler) Closed(*Conn, Result) {}

// TestStaleEventOfReusedDescriptor: in one batch of events, handling the
// first closes connection B and dials for A, whose new upstream socket
// takes B's descriptor number; B's event later in the same batch is
// stale and must not reach A's upstream socket (it would pass for the
// connect's completion: A dialling a black hole would be told it is
// connected).
func TestStaleEventOfReusedDescriptor(t *testing.T) {
	hole := netip.MustParseAddrPort(testbed.BlackHole(t))
	opts := &DialOptions{Timeout: time.Minute}
	var a, b *Conn
	var bfd, asfd int
	opened := make(chan *Conn, 2)
	dialed := make(chan error, 2)
	bReceived := false
	h := &funcHandler{
		open: func(c *Conn) { c.ReadFirst(time.Minute); opened <- c },
		received: func(c *Conn, _ []byte, _ error) {
			if c != a {
				bReceived = true
				return
			}
			bfd = b.cfd
			b.Close("test", nil)
			// Every free number below B's is taken for the dial, so
			// that A's new socket gets B's number.
			var fillers []int
			for {
				fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Errorf("open /dev/null: %v", err)
					break
				}
				if fd >= bfd {
					unix.Close(fd)
					break
				}
				fillers = append(fillers, fd)
			}
			a.Dial(hole, opts)
			asfd = a.sfd
			for _, fd := range fillers {
				unix.Close(fd)
			}
		},
		dialed: func(c *Conn, err error) { dialed <- err },
	}
	s := &Server{Handler: h, Loops: 1}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	defer func() { s.Stop(); <-served }()
	var clients [2]net.Conn
	for i, p := range []**Conn{&a, &b} {
		if clients[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
		defer clients[i].Close()
		*p = <-opened
	}
	// Hold the loop while both clients' bytes arrive, so that their
	// events come in one batch, A's first.
	held, release := make(chan struct{}), make(chan struct{})
	a.Post(func(*Conn) { close(held); <-release })
	<-held
	for i, c := range []*Conn{a, b} {
		clients[i].Write([]byte("x"))
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
			if n, _ := unix.IoctlGetInt(c.cfd, unix.SIOCINQ); n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a client's byte did not reach the relay's socket in 20 s")
			}
		}
	}
	marker := make(chan struct{})
	a.Post(func(*Conn) { close(marker) }) // runs after the batch
	close(release)
	select {
	case <-marker:
	case <-time.After(20 * time.Second):
		t.Fatal("the loop did not get to the marker")
	}
	if bReceived || asfd != bfd {
		t.Fatalf("the batch did not reuse B's descriptor (B received first %v, A's upstream socket %d, B's was %d)", bReceived, asfd, bfd)
	}
	select {
	case err := <-dialed:
		t.Fatalf("A's connect to a black hole ended (%v): B's stale event reached A's socket", err)
	default:
	}
}
