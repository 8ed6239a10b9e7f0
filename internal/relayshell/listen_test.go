package relayshell

import (
	"context"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSetListenerKeepalive checks that a connection accepted on a
// listener the front's way (SetListener with GoKeepalive, as Front.Serve
// does, on a listener without Go's per-connection keepalive as cmd/origin
// opens it) has Go's default keepalive, inherited from the listening
// socket rather than set per connection.
func TestSetListenerKeepalive(t *testing.T) {
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	SetListener(ln, GoKeepalive)
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15},
		{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9},
		{"TCP_NODELAY", unix.IPPROTO_TCP, unix.TCP_NODELAY, 1},
	} {
		var got int
		var gerr error
		if err := raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), tt.level, tt.opt) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil {
			t.Fatalf("%s: %v", tt.name, gerr)
		}
		if got != tt.want {
			t.Errorf("%s = %d, want %d", tt.name, got, tt.want)
		}
	}
}
