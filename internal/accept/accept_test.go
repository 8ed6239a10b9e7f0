package accept

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// scripted is a listener whose Accept returns the scripted errors in turn,
// then accepts from the real loopback listener inside it.
type scripted struct {
	net.Listener
	errs []error
}

func (s *scripted) Accept() (net.Conn, error) {
	if len(s.errs) > 0 {
		err := s.errs[0]
		s.errs = s.errs[1:]
		return nil, err
	}
	return s.Listener.Accept()
}

func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

// TestTemporaryErrorsBackOff: EMFILE, ENFILE and ECONNABORTED never end
// serving; the waits double from 5 ms to 1 s; one log line per window.
func TestTemporaryErrorsBackOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var errs []error
	for range 10 {
		errs = append(errs, acceptErr(syscall.EMFILE))
	}
	errs = append(errs, acceptErr(syscall.ENFILE), acceptErr(syscall.ECONNABORTED))
	var waits []time.Duration
	logs := &testbed.Buffer{}
	got := make(chan net.Conn, 1)
	closing := make(chan struct{})
	l := Loop{
		Handle: func(c net.Conn) { got <- c },
		Closing: func() bool {
			select {
			case <-closing:
				return true
			default:
				return false
			}
		},
		Log:   slog.New(slog.NewJSONHandler(logs, nil)),
		Sleep: func(d time.Duration) { waits = append(waits, d) },
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve(&scripted{Listener: ln, errs: errs}) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case a := <-got:
		a.Close()
	case err := <-served:
		t.Fatalf("Serve ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted after the temporary errors")
	}
	want := "[5ms 10ms 20ms 40ms 80ms 160ms 320ms 640ms 1s 1s 1s 1s]"
	if fmt.Sprint(waits) != want {
		t.Fatalf("waits %v, want %s", waits, want)
	}
	if lines := logs.JSONLines("accept failed, retrying"); len(lines) != 1 {
		t.Fatalf("%d log lines for 12 errors in one window, want 1:\n%s", len(lines), logs)
	}
	close(closing)
	ln.Close()
	if err := <-served; err != nil {
		t.Fatalf("Serve after Closing: %v, want nil", err)
	}
}

// TestListenerFailureEndsServe: an error that is not temporary ends Serve
// with the error, naming the listener (the binary then exits).
func TestListenerFailureEndsServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l := Loop{Handle: func(c net.Conn) { c.Close() }, Closing: func() bool { return false }}
	err = l.Serve(&scripted{Listener: ln, errs: []error{acceptErr(syscall.EINVAL)}})
	if err == nil || !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "accept on "+ln.Addr().String()) {
		t.Fatalf("Serve = %v, want the EINVAL naming %s", err, ln.Addr())
	}
}

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

func TestSelfTarget(t *testing.T) {
	for _, tc := range []struct {
		listen []string
		target string
		want   string
	}{
		{[]string{"127.0.0.1:636"}, "127.0.0.1:636", "127.0.0.1:636"},
		{[]string{"127.0.0.1:636"}, "localhost:636", "127.0.0.1:636"},
		{[]string{"127.0.0.1:636"}, "[::ffff:127.0.0.1]:636", "127.0.0.1:636"},
		{[]string{"127.0.0.1:636"}, "0.0.0.0:636", "127.0.0.1:636"},
		{[]string{"0.0.0.0:636"}, "127.0.0.1:636", "0.0.0.0:636"},
		{[]string{":636"}, "127.0.0.5:636", ":636"},
		{[]string{"[::]:636"}, "[::1]:636", "[::]:636"},
		{[]string{"10.9.9.9:1", ":636"}, "localhost:636", ":636"},
		{[]string{"127.0.0.1:636"}, "127.0.0.1:637", ""},
		{[]string{"127.0.0.2:636"}, "127.0.0.1:636", ""},
		{[]string{"127.0.0.1:0"}, "127.0.0.1:0", ""},
		{[]string{"0.0.0.0:636"}, "192.0.2.1:636", ""},
		{[]string{"0.0.0.0:636"}, "no-such-host.invalid:636", ""},
	} {
		if got := SelfTarget(tc.listen, tc.target); got != tc.want {
			t.Errorf("SelfTarget(%q, %q) = %q, want %q", tc.listen, tc.target, got, tc.want)
		}
	}
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
