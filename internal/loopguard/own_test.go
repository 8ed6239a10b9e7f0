package loopguard

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// TestOwnCutsLoops: a connection accepted from one of our outbound
// sockets is a loop whichever side registers first.
func TestOwnCutsLoops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pair := func() (out, in net.Conn) {
		out, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		in, err = ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { out.Close(); in.Close() })
		return out, in
	}
	t.Run("dialed first", func(t *testing.T) {
		o := NewOwn()
		out, in := pair()
		if dialed(o, out) {
			t.Fatal("Dialed found a loop before any accept")
		}
		if !accepted(o, in) {
			t.Fatal("Accepted missed the connection from our own socket")
		}
		closed(o, out)
		if accepted(o, in) {
			t.Fatal("a closed outbound socket is still ours")
		}
	})
	t.Run("accepted first", func(t *testing.T) {
		o := NewOwn()
		out, in := pair()
		if accepted(o, in) {
			t.Fatal("Accepted found a loop before any dial")
		}
		if !dialed(o, out) {
			t.Fatal("Dialed missed the connection accepted from it")
		}
		in.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := in.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("the looped connection is not closed: %v", err)
		}
	})
	// A client on this host whose connection comes from the address:port
	// an outbound socket uses toward another destination (one local port,
	// two 4-tuples) is not a loop, whichever side registers first.
	t.Run("same local port, another destination", func(t *testing.T) {
		elsewhere, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer elsewhere.Close()
		reuse := func(network, address string, c syscall.RawConn) error {
			var serr error
			c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) })
			return serr
		}
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, Control: reuse}
		for _, dialedFirst := range []bool{true, false} {
			out, err := d.Dial("tcp", elsewhere.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			same := net.Dialer{LocalAddr: out.LocalAddr(), Control: reuse}
			client, err := same.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			in, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			if in.RemoteAddr().String() != out.LocalAddr().String() {
				t.Fatalf("accepted from %v, want the outbound socket's address %v", in.RemoteAddr(), out.LocalAddr())
			}
			o := NewOwn()
			if dialedFirst {
				if dialed(o, out) || accepted(o, in) {
					t.Fatal("dialled first: a client sharing the outbound socket's port is taken for a loop")
				}
			} else {
				if accepted(o, in) || dialed(o, out) {
					t.Fatal("accepted first: a client sharing the outbound socket's port is taken for a loop")
				}
				in.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
				if _, err := in.Read(make([]byte, 1)); errors.Is(err, net.ErrClosed) {
					t.Fatal("the client's connection was closed")
				}
			}
			out.Close()
			client.Close()
			in.Close()
		}
	})
	t.Run("strangers", func(t *testing.T) {
		o := NewOwn()
		out, in := pair()
		other, _ := pair()
		dialed(o, other)
		if accepted(o, in) {
			t.Fatal("a connection from another socket is a loop")
		}
		forget(o, in)
		if dialed(o, out) {
			t.Fatal("a forgotten connection is still matched")
		}
	})
}

// ends returns c's remote and local addresses, IPv4-mapped ones unmapped:
// how the relays' event loops give them to Own.
func ends(c net.Conn) (remote, local netip.AddrPort) {
	r := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	l := c.LocalAddr().(*net.TCPAddr).AddrPort()
	return unmap(r), unmap(l)
}

func accepted(o *Own, c net.Conn) bool { r, l := ends(c); return o.Accepted(r, l, c) }
func dialed(o *Own, c net.Conn) bool   { r, l := ends(c); return o.Dialed(l, r) }
func closed(o *Own, c net.Conn)        { _, l := ends(c); o.Closed(l) }
func forget(o *Own, c net.Conn)        { r, l := ends(c); o.Forget(r, l, c) }
