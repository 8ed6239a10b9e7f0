package core

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair is a loopback TCP connection: the accepted end wrapped in a
// rawSock, and the dialled end as it is.
func tcpPair(t *testing.T) (*rawSock, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, ok := newRawSock(c).(*rawSock)
	if !ok {
		t.Fatal("a TCP connection was not wrapped")
	}
	return s, peer
}

// A rawSock reads and writes as the net.Conn it wraps: bytes both ways at
// once (a write larger than the socket buffers waits for the peer to
// read), io.EOF at the end, and errors that say what they are (the read
// deadline a timeout, a write after the peer reset a failure).
func TestRawSock(t *testing.T) {
	s, peer := tcpPair(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(len(big))))
		got <- b
	}()
	go peer.Write([]byte("hello"))
	if n, err := s.Write(big); n != len(big) || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("the peer read %d bytes, not the %d written", len(b), len(big))
	}
	buf := make([]byte, 16)
	if n, err := io.ReadFull(s, buf[:5]); n != 5 || err != nil || string(buf[:5]) != "hello" {
		t.Fatalf("read: %q, %v", buf[:n], err)
	}

	s.SetReadDeadline(time.Now().Add(-time.Second)) // passed
	_, err := s.Read(buf)
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	s.SetReadDeadline(time.Time{})

	peer.(*net.TCPConn).CloseWrite()
	if n, err := s.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read at the peer's end: %d, %v, want io.EOF", n, err)
	}

	peer.(*net.TCPConn).SetLinger(0)
	peer.Close() // a reset
	deadline := time.Now().Add(10 * time.Second)
	for err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		if time.Now().After(deadline) {
			t.Fatal("writes to a reset connection kept succeeding")
		}
		_, err = s.Write([]byte("x"))
	}
	if !errors.As(err, new(*net.OpError)) {
		t.Fatalf("write after a reset: %T %v, want a *net.OpError", err, err)
	}
	s.Close()
	if _, err := s.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v, want net.ErrClosed", err)
	}
}
