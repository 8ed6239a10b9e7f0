package evloop

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// holder keeps the connections it is given open until the end.
type holder struct{ conns chan *Conn }

func (h *holder) Open(c *Conn)                  { h.conns <- c }
func (h *holder) Received(*Conn, []byte, error) {}
func (h *holder) Dialed(*Conn, error)           {}
func (h *holder) Closed(*Conn, Result)          {}

// TestPostAfterStopWritesNothing: a goroutine that comes back with
// Conn.Post (a name lookup, loopguard.Own's Kill) after Stop must not write
// to the loop's eventfd: the loop closed it when it ended, and the number
// may belong to another file by then (it got the 8 bytes of the wake-up).
func TestPostAfterStopWritesNothing(t *testing.T) {
	h := &holder{conns: make(chan *Conn, 1)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: h, Loops: 1}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := <-h.conns
	evfd := s.loops[0].evfd
	s.Stop()
	<-served
	link := fmt.Sprintf("/proc/self/fd/%d", evfd)
	deadline := time.Now().Add(10 * time.Second)
	for { // the loop closes its eventfd as it ends
		l, err := os.Readlink(link)
		if err != nil {
			break
		}
		if !strings.Contains(l, "eventfd") {
			t.Fatalf("descriptor %d became %s before the test could take it", evfd, l)
		}
		if time.Now().After(deadline) {
			t.Fatal("the stopped loop kept its eventfd")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Another file takes the number, as the next open would: the write end
	// of a pipe sits at evfd, and its read end at another number (the
	// kernel gives the lowest free one, so pipe2 itself may put either
	// end at evfd).
	r, w := pipeWriteEndAt(t, evfd)
	defer syscall.Close(r)
	defer syscall.Close(w)
	// The pipe is wired as the loop would find it: a write to evfd
	// reaches r.
	probe := make([]byte, 64)
	if _, err := syscall.Write(evfd, []byte{1}); err != nil {
		t.Fatalf("write to the pipe at %d: %v", evfd, err)
	}
	if n, err := syscall.Read(r, probe); n != 1 {
		t.Fatalf("the pipe's read end got %d bytes (%v) of a 1-byte write to %d", n, err, evfd)
	}
	c.Post(func(*Conn) {})
	c.Kill()
	if n, _ := syscall.Read(r, probe); n > 0 {
		t.Fatalf("Post after Stop wrote %d bytes to the descriptor the loop's eventfd had", n)
	}
}

// pipeWriteEndAt makes a non-blocking pipe whose write end is descriptor
// fd (free when called) and returns both ends; the read end is never fd.
func pipeWriteEndAt(t *testing.T, fd int) (r, w int) {
	t.Helper()
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w = p[0], p[1]
	if r == fd { // move the read end off fd first
		nr, err := unix.FcntlInt(uintptr(r), unix.F_DUPFD_CLOEXEC, fd+1)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Close(r)
		r = nr
	}
	if w != fd {
		if err := syscall.Dup3(w, fd, syscall.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		syscall.Close(w)
		w = fd
	}
	return r, w
}

// TestResetClientWhileUpstreamFull: the upstream has stopped reading and
// the client's bytes wait for room; the client then resets. Its error
// must end the connection (both sockets closed, client-error), not wait
// behind the upstream's full buffer for as long as the upstream lives.
func TestResetClientWhileUpstreamFull(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	up := upstream(t, func(c net.Conn) { <-hold }) // never reads
	r := newRelay(up)
	_, addr := serve(t, r)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	for { // until every buffer on the way is full
		if _, err := c.Write(buf); err != nil {
			break
		}
	}
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
	select {
	case res := <-r.results:
		if res.Reason != ReasonClientError {
			t.Fatalf("%+v, want client-error", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection of a client that reset is still open 10 s later (the upstream never reads)")
	}
}

// TestResetUpstreamWhileClientFull is the other way: the client has
// stopped reading, the upstream fills every buffer and resets.
func TestResetUpstreamWhileClientFull(t *testing.T) {
	up := upstream(t, func(c net.Conn) {
		buf := make([]byte, 1<<20)
		c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		for {
			if _, err := c.Write(buf); err != nil {
				break
			}
		}
		c.(*net.TCPConn).SetLinger(0)
	})
	r := newRelay(up)
	_, addr := serve(t, r)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() // never read
	select {
	case res := <-r.results:
		if res.Reason != ReasonServerError {
			t.Fatalf("%+v, want server-error", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection of an upstream that reset is still open 10 s later (the client never reads)")
	}
}

// TestHalfClosedForeverParks: a client that half-closed and an upstream
// that neither sends nor closes leave the connection open, and the loop
// parked (no spin on the client's lasting RDHUP, nor on an upstream that
// reset while the client's FIN waits).
func TestHalfClosedForeverParks(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	up := upstream(t, func(c net.Conn) { <-hold })
	r := newRelay(up)
	_, addr := serve(t, r)
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("x"))
		c.(*net.TCPConn).CloseWrite()
	}
	time.Sleep(200 * time.Millisecond) // the FINs are through
	c0 := processCPU()
	time.Sleep(500 * time.Millisecond)
	if used := processCPU() - c0; used > 250*time.Millisecond {
		t.Fatalf("used %v of CPU in 500 ms with half-closed connections: a loop is spinning", used)
	}
	select {
	case res := <-r.results:
		t.Fatalf("a half-closed connection ended: %+v", res)
	default:
	}
}

// TestSourceBindIPv6: Dial from a source address, IPv4 and IPv6; the
// upstream sees the connection come from it.
func TestSourceBindIPv6(t *testing.T) {
	for _, tc := range []struct{ listen, source string }{
		{"127.0.0.1:0", "127.0.0.3"},
		{"[::1]:0", "::1"},
	} {
		ln, err := net.Listen("tcp", tc.listen)
		if err != nil {
			t.Fatal(err)
		}
		from := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			from <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			io.Copy(c, c)
		}()
		r := newRelay(ln.Addr().String())
		r.opts.Source = netip.MustParseAddr(tc.source)
		_, addr := serve(t, r)
		if got := echo(t, addr, "hi"); got != "hi" {
			t.Fatalf("%s: echo %q", tc.source, got)
		}
		if got := <-from; got != tc.source {
			t.Fatalf("upstream saw %s, want %s", got, tc.source)
		}
		ln.Close()
	}
}

// TestServeRacingStop: Serve and Stop at the same time; Serve returns
// whichever runs first: a Stop between Serve's check and its posting of
// the listener must not end the loops first and leave Serve waiting for
// ever (Serve posts under s.mu).
func TestServeRacingStop(t *testing.T) {
	for i := range 3000 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{Handler: &holder{conns: make(chan *Conn, 1)}, Loops: 1}
		s.start()
		served := make(chan error, 1)
		if i%2 == 0 {
			go s.Stop()
			go func() { served <- s.Serve(ln) }()
		} else {
			go func() { served <- s.Serve(ln) }()
			go s.Stop()
		}
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return after Stop")
		}
	}
}

// TestFirstBufferPooledAfterConsume: the front consumes a header from the
// bytes ReadFirst buffered; the buffer still goes back to the pool when
// the connection no longer needs it: no allocation per connection with a
// header (neither a 4 KiB buffer nor a slice header for Put).
func TestFirstBufferPooledAfterConsume(t *testing.T) {
	c := &Conn{}
	cycle := func() {
		c.takePre()
		c.pre = c.pre[:100]
		c.Consume(60)
		c.putPre()
	}
	cycle()
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Fatalf("%v allocations per connection for the first buffer, want 0 (pooled)", n)
	}
}
