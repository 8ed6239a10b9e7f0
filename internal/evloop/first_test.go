package evloop

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// firstCall is one call of firstJudge's Received.
type firstCall struct {
	port uint16 // the client's port
	n    int
	err  error
}

// firstJudge decides on first reads by their first byte: 'G' (garbage)
// is refused once Received sees a full small buffer, 'W' (wanted) is
// taken once it holds wantBig bytes, 'S' (small) once it holds a line.
// Every call goes to calls, every end to closed.
type firstJudge struct {
	calls  chan firstCall
	closed chan Result
}

const wantBig = 10000 // more than firstSmall, less than MaxFirst

func newFirstJudge() *firstJudge {
	return &firstJudge{calls: make(chan firstCall, 1000), closed: make(chan Result, 100)}
}

func (h *firstJudge) Open(c *Conn) { c.ReadFirst(time.Minute) } // a hang guard, never reached

func (h *firstJudge) Received(c *Conn, b []byte, err error) {
	h.calls <- firstCall{c.Peer().Port(), len(b), err}
	switch {
	case err != nil:
		c.Close("error", err)
	case len(b) == 0:
	case b[0] == 'G' && len(b) == firstSmall:
		c.Close("garbage", nil)
	case b[0] == 'W' && len(b) >= wantBig:
		c.Close("wanted", nil)
	case b[0] == 'S' && bytes.IndexByte(b, '\n') >= 0:
		c.Close("small", nil)
	}
}

func (h *firstJudge) Dialed(*Conn, error)      {}
func (h *firstJudge) Closed(_ *Conn, r Result) { h.closed <- r }

// serveServer runs s on a loopback listener until the test ends.
func serveServer(t *testing.T, s *Server) string {
	t.Helper()
	s.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		<-served
		s.Stop()
	})
	return ln.Addr().String()
}

// send connects to addr and writes b in one write.
func send(t *testing.T, addr string, b []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	return c
}

// until waits for a call of c's that ok accepts, and returns it.
func (h *firstJudge) until(t *testing.T, c net.Conn, ok func(firstCall) bool) firstCall {
	t.Helper()
	port := uint16(c.LocalAddr().(*net.TCPAddr).Port)
	timeout := time.After(30 * time.Second)
	for {
		select {
		case call := <-h.calls:
			if call.port == port && ok(call) {
				return call
			}
		case <-timeout:
			t.Fatal("no such call of Received")
		}
	}
}

func (h *firstJudge) result(t *testing.T) Result {
	t.Helper()
	select {
	case r := <-h.closed:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no connection ended")
	}
	return Result{}
}

// TestFirstGrowsOnlyUndecided: a burst over firstSmall bytes that
// Received refuses on its full small buffer never grows it; one it has
// not decided on grows once, and the rest of the burst, still in the
// edge-triggered socket, is read at once into the larger buffer.
func TestFirstGrowsOnlyUndecided(t *testing.T) {
	h := newFirstJudge()
	s := &Server{Handler: h, Loops: 1}
	addr := serveServer(t, s)

	c := send(t, addr, bytes.Repeat([]byte("G"), 3*firstSmall))
	h.until(t, c, func(call firstCall) bool { return call.n == firstSmall })
	if r := h.result(t); r.Reason != "garbage" {
		t.Fatalf("%+v, want garbage", r)
	}
	if n := s.Grows(); n != 0 {
		t.Fatalf("a refused burst grew %d buffers", n)
	}

	c = send(t, addr, bytes.Repeat([]byte("W"), wantBig))
	h.until(t, c, func(call firstCall) bool { return call.n == firstSmall }) // seen whole before it grows
	h.until(t, c, func(call firstCall) bool { return call.n == wantBig })
	if r := h.result(t); r.Reason != "wanted" {
		t.Fatalf("%+v, want wanted", r)
	}
	if n := s.Grows(); n != 1 {
		t.Fatalf("%d buffers grown, want 1", n)
	}
}

// TestFirstGrowLimit: with MaxGrown held, a first read that would grow
// gets ErrGrowLimit with its full small buffer; a small one still
// passes; once the holder ends, the next one grows again.
func TestFirstGrowLimit(t *testing.T) {
	h := newFirstJudge()
	s := &Server{Handler: h, Loops: 1, MaxGrown: 1}
	addr := serveServer(t, s)
	big := bytes.Repeat([]byte("W"), firstSmall+500) // short of wantBig: undecided, held

	holder := send(t, addr, big)
	h.until(t, holder, func(call firstCall) bool { return call.n == len(big) })

	refused := send(t, addr, big)
	call := h.until(t, refused, func(call firstCall) bool { return call.err != nil })
	if !errors.Is(call.err, ErrGrowLimit) || call.n != firstSmall {
		t.Fatalf("past the limit: %d bytes, %v; want %d bytes, ErrGrowLimit", call.n, call.err, firstSmall)
	}
	if r := h.result(t); !errors.Is(r.Err, ErrGrowLimit) {
		t.Fatalf("%+v, want ErrGrowLimit", r)
	}

	small := send(t, addr, []byte("S small\n"))
	h.until(t, small, func(call firstCall) bool { return call.n == 8 })
	if r := h.result(t); r.Reason != "small" {
		t.Fatalf("%+v, want small", r)
	}

	holder.Close()
	if r := h.result(t); r.Reason != "error" || !errors.Is(r.Err, io.EOF) {
		t.Fatalf("%+v, want the holder's EOF", r)
	}
	next := send(t, addr, bytes.Repeat([]byte("W"), wantBig))
	h.until(t, next, func(call firstCall) bool { return call.n == wantBig })
	if r := h.result(t); r.Reason != "wanted" {
		t.Fatalf("%+v, want wanted", r)
	}
	if n := s.Grows(); n != 2 {
		t.Fatalf("%d buffers grown, want 2 (the holder's, the last one's)", n)
	}
}
