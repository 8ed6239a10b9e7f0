package relay

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestHandleConn feeds the edge a connection it did not accept itself (a
// caller that owns its listener): the bytes reach the origin behind a
// PROXY header naming the client, the echo comes back, and HandleConn
// returns once the connection is finished.
func TestHandleConn(t *testing.T) {
	o := startOrigin(t, true, echo)
	e := startEdge(t, Config{Origins: []string{o.addr}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan struct{})
	go func() { e.HandleConn(server); close(returned) }()

	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, "hello")
	c.(*net.TCPConn).CloseWrite()
	if b, err := io.ReadAll(c); err != nil || string(b) != "hello" {
		t.Fatalf("echo %q, %v", b, err)
	}
	h := <-o.headers
	if src, _, ok := h.TCPAddrs(); !ok || src.String() != c.LocalAddr().String() {
		t.Fatalf("header source %v, want %v", src, c.LocalAddr())
	}
	select {
	case <-returned:
	case <-time.After(20 * time.Second):
		t.Fatal("HandleConn did not return after both directions ended")
	}
}
