package evloop

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// relay is a test Handler: it dials target for every connection, relays
// with prefix and screen, and reports every Result.
type relay struct {
	target  netip.AddrPort
	opts    DialOptions
	prefix  []byte
	screen  func([]byte) error
	first   time.Duration // > 0: ReadFirst for that long, then dial
	results chan Result
	dialErr chan error
	got     chan []byte // what Received saw last
}

func newRelay(target string) *relay {
	r := &relay{results: make(chan Result, 100), dialErr: make(chan error, 100), got: make(chan []byte, 100)}
	if target != "" {
		r.target = netip.MustParseAddrPort(target)
	}
	r.opts = DialOptions{Timeout: 5 * time.Second, NoDelay: true}
	return r
}

func (r *relay) Open(c *Conn) {
	if r.first > 0 {
		c.ReadFirst(r.first)
		return
	}
	c.Dial(r.target, &r.opts)
}

func (r *relay) Received(c *Conn, b []byte, err error) {
	r.got <- bytes.Clone(b)
	switch {
	case err != nil:
		c.Close("first-"+err.Error(), err)
	case bytes.Contains(b, []byte("\n")):
		c.Consume(bytes.IndexByte(b, '\n') + 1) // a one-line "header"
		c.Dial(r.target, &r.opts)
	}
}

func (r *relay) Dialed(c *Conn, err error) {
	if err != nil {
		r.dialErr <- err
		c.Close("dial", err)
		return
	}
	c.Relay(r.prefix, r.screen)
}

func (r *relay) Closed(c *Conn, res Result) { r.results <- res }

// serve starts a Server for h on a loopback listener.
func serve(t *testing.T, h Handler) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: h, Loops: 2, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		s.Stop()
	})
	return s, ln.Addr().String()
}

// upstream is a TCP server running fn for each connection. fn must not
// call t's methods (it may run while the test ends): it reports through
// channels the test reads. The test's cleanup closes the listener and
// every connection and waits for every fn to return.
func upstream(t *testing.T, fn func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testbed.ServeHeld(t, ln, fn)
	return ln.Addr().String()
}

func result(t *testing.T, r *relay) Result {
	t.Helper()
	select {
	case res := <-r.results:
		return res
	case <-time.After(20 * time.Second):
		t.Fatal("no Closed within 20 s")
	}
	return Result{}
}

// TestBulkBothWays sends 64 MiB each way at once through a relay,
// several times, and checks every byte (SHA-256) and the counts: the
// bytes go through splice once a read fills the buffer, and a short
// splice (the Go runtime's preemption signal interrupts one between two
// pipe buffers) must never leave a direction waiting for an EPOLLOUT
// edge that will not come (write retries a short write at once).
func TestBulkBothWays(t *testing.T) {
	const n = 64 << 20
	data := make([]byte, n)
	rng := rand.NewChaCha8([32]byte{1})
	rng.Read(data)
	sum := sha256.Sum256(data)
	upGot := make(chan [32]byte, 4) // what the upstream received, per round
	up := upstream(t, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		done := make(chan [32]byte)
		go func() {
			h := sha256.New()
			io.Copy(h, c)
			var s [32]byte
			copy(s[:], h.Sum(nil))
			done <- s
		}()
		c.Write(data)
		c.(*net.TCPConn).CloseWrite()
		upGot <- <-done
	})
	r := newRelay(up)
	_, addr := serve(t, r)
	for i := range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		got := make(chan [32]byte)
		go func() {
			h := sha256.New()
			io.Copy(h, c)
			var s [32]byte
			copy(s[:], h.Sum(nil))
			got <- s
		}()
		if _, err := c.Write(data); err != nil {
			t.Fatalf("round %d: write: %v", i, err)
		}
		c.(*net.TCPConn).CloseWrite()
		if s := <-got; s != sum {
			t.Fatalf("round %d: the client received other bytes than the upstream sent", i)
		}
		select {
		case s := <-upGot:
			if s != sum {
				t.Fatalf("round %d: the upstream received other bytes than the client sent", i)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the upstream never finished reading", i)
		}
		c.Close()
		res := result(t, r)
		if res.Reason != ReasonEOF || res.Up != n || res.Down != n {
			t.Fatalf("round %d: %+v, want eof with %d bytes each way", i, res, n)
		}
	}
}

// TestHalfClose: the client finishes sending first; the upstream answers
// after it saw EOF, and the answer still reaches the client.
func TestHalfClose(t *testing.T) {
	up := upstream(t, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		c.Write(append([]byte("got "), b...))
	})
	r := newRelay(up)
	_, addr := serve(t, r)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "question")
	c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "got question" {
		t.Fatalf("client read %q, %v", b, err)
	}
	if res := result(t, r); res.Reason != ReasonEOF || res.Up != 8 || res.Down != 12 {
		t.Fatalf("%+v, want eof, 8 up, 12 down", res)
	}
}

// TestPrefixAndScreen: the prefix goes first, in front of the client's
// bytes; a screen holds bytes while it wants more and refuses the client
// when it says so, before the upstream sees any of them.
func TestPrefixAndScreen(t *testing.T) {
	seen := make(chan string, 10)
	up := upstream(t, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		seen <- string(b)
	})
	r := newRelay(up)
	r.prefix = []byte("HDR|")
	r.screen = func(b []byte) error {
		switch {
		case bytes.HasPrefix(b, []byte("BAD")):
			return errors.New("refused")
		case len(b) < 3:
			return ErrMore
		}
		return nil
	}
	_, addr := serve(t, r)
	for _, tc := range []struct {
		parts  []string
		want   string
		reason string
	}{
		{[]string{"hello"}, "HDR|hello", ReasonEOF},
		{[]string{"h", "e", "llo"}, "HDR|hello", ReasonEOF},
		{[]string{"B", "AD and more"}, "HDR|", ReasonClientError},
		{[]string{"h"}, "HDR|h", ReasonEOF}, // undecided, then EOF: forwarded as it came
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range tc.parts {
			io.WriteString(c, p)
			time.Sleep(20 * time.Millisecond) // separate segments
		}
		c.(*net.TCPConn).CloseWrite()
		res := result(t, r)
		c.Close()
		if res.Reason != tc.reason {
			t.Errorf("%q: reason %q (%v), want %q", tc.parts, res.Reason, res.Err, tc.reason)
		}
		select {
		case got := <-seen:
			if got != tc.want {
				t.Errorf("%q: upstream got %q, want %q", tc.parts, got, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q: upstream saw nothing", tc.parts)
		}
	}
}

// TestDialTimeout: a connect that gets no answer fails with ErrTimeout
// after DialOptions.Timeout; a refused one fails at once.
func TestDialTimeout(t *testing.T) {
	r := newRelay(testbed.BlackHole(t))
	r.opts.Timeout = 200 * time.Millisecond
	_, addr := serve(t, r)
	t0 := time.Now() // before the client's connect, so before the relay's
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case err := <-r.dialErr:
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("dial error %v, want ErrTimeout", err)
		}
		if d := time.Since(t0); d < r.opts.Timeout {
			t.Fatalf("timed out after %v, before the %v timeout", d, r.opts.Timeout)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connect never timed out")
	}

	refused := newRelay(testbed.FreeAddr(t, "127.0.0.1"))
	_, addr = serve(t, refused)
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	select {
	case err := <-refused.dialErr:
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial error %v, want connection refused", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a refused connect was not reported")
	}
}

// TestReadFirst: the client's bytes go to Received as they come; what
// follows the consumed "header" reaches the upstream first; a client that
// sends nothing gets ErrTimeout.
func TestReadFirst(t *testing.T) {
	seen := make(chan string, 1)
	up := upstream(t, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		seen <- string(b)
	})
	r := newRelay(up)
	r.first = time.Minute // a hang guard: the client's bytes come however slow the machine
	_, addr := serve(t, r)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "HEAD")
	time.Sleep(20 * time.Millisecond)
	io.WriteString(c, "ER\npayload")
	time.Sleep(20 * time.Millisecond)
	io.WriteString(c, "+more")
	c.(*net.TCPConn).CloseWrite()
	if got := <-seen; got != "payload+more" {
		t.Fatalf("upstream got %q, want payload+more", got)
	}
	c.Close()
	result(t, r)

	quick := newRelay(up)
	quick.first = 300 * time.Millisecond
	_, addr = serve(t, quick)
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	res := result(t, quick)
	if !errors.Is(res.Err, ErrTimeout) {
		t.Fatalf("silent client: %+v, want ErrTimeout", res)
	}
}

// TestAbort: Abort closes every open connection, each Closed with
// ReasonAborted, and the clients see their connection end.
func TestAbort(t *testing.T) {
	up := upstream(t, func(c net.Conn) { io.Copy(c, c) })
	r := newRelay(up)
	s, addr := serve(t, r)
	var conns []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// An echo through the upstream: the connection is relaying when
		// Abort comes, however slow the machine.
		if got := roundTrip(t, c, "x"); got != "x" {
			t.Fatalf("echo %q", got)
		}
		conns = append(conns, c)
	}
	s.Abort()
	for range conns {
		if res := result(t, r); res.Reason != ReasonAborted {
			t.Fatalf("%+v, want aborted", res)
		}
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a client read data after Abort")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("a client's connection stayed open after Abort")
		}
	}
}

// TestAcceptBackOff: out of descriptors, accept fails; the loop logs it
// (rate-limited), backs off instead of spinning, and serves again once
// descriptors are free.
func TestAcceptBackOff(t *testing.T) {
	up := upstream(t, func(c net.Conn) { io.Copy(c, c) })
	r := newRelay(up)
	var logs testbed.Buffer
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: r, Loops: 1, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	go s.Serve(ln)
	defer s.Stop()
	addr := ln.Addr().String()
	// Warm up (the loop's own descriptors exist), then leave no descriptor
	// for accept: hold them all with pipes.
	if got := echo(t, addr, "warm"); got != "warm" {
		t.Fatalf("echo %q", got)
	}
	// The client's socket is made while descriptors remain, and connected
	// once none is left: the handshake needs none, the accept does.
	sfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort(addr)
	var rl syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	var held []int
	for {
		var p [2]int
		if err := syscall.Pipe(p[:]); err != nil {
			if fd, err := syscall.Dup(0); err == nil { // the last one
				held = append(held, fd)
			}
			break
		}
		held = append(held, p[0], p[1])
		if len(held) > int(rl.Cur) {
			t.Fatal("pipes never ran out")
		}
	}
	if err := syscall.Connect(sfd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "accept failed, retrying") {
		if time.Now().After(deadline) {
			t.Fatalf("no accept failure logged; log:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, fd := range held {
		syscall.Close(fd)
	}
	f := os.NewFile(uintptr(sfd), "client")
	client, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	client.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(client, "again")
	b := make([]byte, 5)
	if _, err := io.ReadFull(client, b); err != nil || string(b) != "again" {
		t.Fatalf("after the back-off: %q, %v", b, err)
	}
	if n := strings.Count(logs.String(), "accept failed, retrying"); n != 1 {
		t.Errorf("%d accept failure lines, want 1 (rate-limited)", n)
	}
}

func echo(t *testing.T, addr, msg string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return roundTrip(t, c, msg)
}

// TestIdleLoopParks: once its connections are over and their timeouts
// past, a loop parks; it does not poll (a read deadline of an expired
// timeout left on its epoll descriptor would make it spin). The process's own CPU time is counted, not wall time: a
// loop that spins burns the whole window, a parked one next to nothing.
func TestIdleLoopParks(t *testing.T) {
	r := newRelay(testbed.BlackHole(t)) // the loop waits for the connect's timeout
	r.opts.Timeout = 20 * time.Millisecond
	_, addr := serve(t, r)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := <-r.dialErr; !errors.Is(err, ErrTimeout) {
		t.Fatalf("dial: %v", err)
	}
	result(t, r)
	c0 := processCPU()
	time.Sleep(500 * time.Millisecond)
	if used := processCPU() - c0; used > 250*time.Millisecond {
		t.Fatalf("the idle process used %v of CPU in 500 ms: a loop is spinning", used)
	}
}

// TestAdoptAfterStop: once the loops are stopped, Adopt refuses a
// connection (and closes it) instead of handing it to a loop that will
// never run it.
func TestAdoptAfterStop(t *testing.T) {
	up := upstream(t, func(c net.Conn) { io.Copy(c, c) })
	r := newRelay(up)
	s := &Server{Handler: r, Loops: 1}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	adopt := func() (net.Conn, error) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return c, s.Adopt(sc, nil)
	}
	c, err := adopt()
	if err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(t, c, "one"); got != "one" {
		t.Fatalf("adopted connection echoed %q", got)
	}
	c.Close()
	result(t, r)
	s.Stop()
	c, err = adopt()
	if !errors.Is(err, ErrStopped) {
		c.Close()
		t.Fatalf("Adopt after Stop: %v, want ErrStopped", err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the refused connection: %v, want it closed (EOF)", err)
	}
}

func roundTrip(t *testing.T, c net.Conn, msg string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, msg)
	b := make([]byte, len(msg))
	io.ReadFull(c, b)
	return string(b)
}

// processCPU is the test process's user and system time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
