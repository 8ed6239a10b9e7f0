package relay

import (
	"io"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestHandleConn feeds the edge a connection it did not accept itself (a
// caller that owns its listener): the bytes reach the origin behind a
// PROXY header naming the client, the echo comes back, and HandleConn
// returns once the connection is finished.
func TestHandleConn(t *testing.T) {
	o := startOrigin(t, true, echo)
	e := startEdge(t, Config{Origins: OriginList(o.addr)})
	c, server := testbed.TCPPair(t)
	returned := make(chan struct{})
	go func() { e.HandleConn(server); close(returned) }()

	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, "hello")
	c.CloseWrite()
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
