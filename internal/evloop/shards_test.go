package evloop

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"golang.org/x/sys/unix"
)

// loopCounts is, for each loop of s, the connections it accepted (read
// in the loops).
func loopCounts(t testing.TB, s *Server) []int {
	t.Helper()
	var accepted []int
	for _, l := range s.loops {
		done := make(chan int, 1)
		l.post(func() { done <- l.accepted })
		select {
		case v := <-done:
			accepted = append(accepted, v)
		case <-time.After(20 * time.Second):
			t.Fatal("a loop did not run a posted function within 20 s")
		}
	}
	return accepted
}

// listenSockets is, for each loop of s, the inode of the socket behind
// its (first) listening descriptor (one socket shared by the loops, or
// one each), and that socket's TCP_DEFER_ACCEPT.
func listenSockets(t testing.TB, s *Server) (inodes []uint64, deferAccept []int) {
	t.Helper()
	for _, l := range s.loops {
		done := make(chan uint64, 1)
		l.post(func() {
			var st unix.Stat_t
			if len(l.lns) == 0 || unix.Fstat(l.lns[0].fd, &st) != nil {
				done <- 0
				return
			}
			v, _ := unix.GetsockoptInt(l.lns[0].fd, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT)
			deferAccept = append(deferAccept, v)
			done <- st.Ino
		})
		select {
		case v := <-done:
			inodes = append(inodes, v)
		case <-time.After(20 * time.Second):
			t.Fatal("a loop did not run a posted function within 20 s")
		}
	}
	return inodes, deferAccept
}

// closer closes every connection it is given, after checking in the loop
// that the accepted socket inherited TCP_NODELAY (set on the listener
// Serve was given: a shard copies it).
type closer struct{ noDelay chan int }

func (h *closer) Open(c *Conn) {
	v, _ := unix.GetsockoptInt(c.cfd, unix.IPPROTO_TCP, unix.TCP_NODELAY)
	h.noDelay <- v
	c.Close("test", nil)
}
func (h *closer) Received(*Conn, []byte, error) {}
func (h *closer) Dialed(*Conn, error)           {}
func (h *closer) Closed(*Conn, Result)          {}

// serveShards serves a closer with loops loops on a Listen socket on
// addr (with TCP_NODELAY set, as the relays do), and returns the server,
// the handler, the bound address and Serve's result.
func serveShards(t *testing.T, addr string, loops int) (*Server, *closer, string, chan error) {
	t.Helper()
	ln, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := ln.(*net.TCPListener).SyscallConn()
	raw.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, 1)
	})
	h := &closer{noDelay: make(chan int, 1000)}
	s := &Server{Handler: h, Loops: loops}
	served := make(chan error, 1)
	bound := ln.Addr().String()
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return s, h, bound, served
}

// connectClosed connects to addr, sends a byte (under TCP_DEFER_ACCEPT
// the kernel completes the connection only then) and waits for the
// server's close.
func connectClosed(t *testing.T, network, addr string) {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{1})
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	// The server closes with the byte unread: a reset, or EOF if it
	// comes first.
	if _, err := c.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read: %v, want EOF or a reset (the server closes)", err)
	}
}

// TestShardsEveryLoopAccepts: with SO_REUSEPORT (Listen) each loop has a
// listening socket of its own, and the kernel spreads connections over
// them: every one of four loops accepts some of 400 connections (each
// from a new port, so a new hash), on IPv4, on IPv6 and on the
// dual-stack wildcard with port 0 (the shards take the port the first
// socket was given), and every accepted socket has the listener's
// TCP_NODELAY, every shard its TCP_DEFER_ACCEPT.
func TestShardsEveryLoopAccepts(t *testing.T) {
	const loops, conns = 4, 400
	for _, tc := range []struct{ listen, dial string }{
		{"127.0.0.1:0", "127.0.0.1"},
		{"[::1]:0", "::1"},
		{":0", "127.0.0.1"},
		{":0", "::1"},
	} {
		t.Run(tc.listen+"-"+tc.dial, func(t *testing.T) {
			if tc.dial == "::1" {
				testbed.NeedIPv6Loopback(t)
			}
			s, h, bound, _ := serveShards(t, tc.listen, loops)
			_, port, _ := net.SplitHostPort(bound)
			addr := net.JoinHostPort(tc.dial, port)
			for range conns {
				connectClosed(t, "tcp", addr)
				if v := <-h.noDelay; v != 1 {
					t.Fatalf("an accepted socket has TCP_NODELAY %d, want the listener's 1", v)
				}
			}
			inodes, deferAccept := listenSockets(t, s)
			for i, v := range deferAccept {
				if v != 1 {
					t.Errorf("loop %d's listening socket has TCP_DEFER_ACCEPT %d, want the first one's 1", i, v)
				}
			}
			for i, a := range inodes {
				for _, b := range inodes[:i] {
					if a == 0 || a == b {
						t.Fatalf("the loops' listening sockets (inodes) %v: want one of its own each", inodes)
					}
				}
			}
			accepted := loopCounts(t, s)
			sum := 0
			for i, n := range accepted {
				if n == 0 {
					t.Errorf("loop %d accepted none of %d connections (per loop: %v)", i, conns, accepted)
				}
				sum += n
			}
			if sum != conns {
				t.Errorf("the loops accepted %d connections, want %d (per loop: %v)", sum, conns, accepted)
			}
		})
	}
}

// TestCloseClosesEveryShard: Close (what SIGTERM does first) closes every
// loop's listening socket, so a new connection is refused whichever
// shard its hash would pick (200 tries, each from a new port).
func TestCloseClosesEveryShard(t *testing.T) {
	s, h, addr, served := serveShards(t, "127.0.0.1:0", 4)
	connectClosed(t, "tcp", addr)
	<-h.noDelay
	s.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve after Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return within 20 s of Close")
	}
	for i := range 200 {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			t.Fatalf("connect %d after Close was accepted by the kernel: a shard still listens", i)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("connect %d after Close: %v, want connection refused", i, err)
		}
	}
}

// TestListenRefusesTakenAddress: SO_REUSEPORT does not let a second
// Listen (another edge of the same user) share an address already
// listened on: it fails as a plain listen would. A plain listen fails on
// a Listen socket too.
func TestListenRefusesTakenAddress(t *testing.T) {
	_, _, addr, _ := serveShards(t, "127.0.0.1:0", 2)
	if ln, err := Listen(addr); err == nil {
		ln.Close()
		t.Fatal("a second Listen on a served address succeeded")
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second Listen: %v, want address already in use", err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatal("a plain listen on a served address succeeded")
	}
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if ln, err := Listen(other.Addr().String()); err == nil {
		ln.Close()
		t.Fatal("Listen on an address a plain listener holds succeeded")
	}
}

// TestSharedListenerWithoutReusePort: a listener without SO_REUSEPORT
// (net.Listen) is still served by every loop, through one socket.
func TestSharedListenerWithoutReusePort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &closer{noDelay: make(chan int, 100)}
	s := &Server{Handler: h, Loops: 2}
	go s.Serve(ln)
	defer s.Stop()
	for range 20 {
		connectClosed(t, "tcp", ln.Addr().String())
	}
	if in, _ := listenSockets(t, s); in[0] == 0 || in[0] != in[1] {
		t.Fatalf("the loops' listening sockets (inodes) %v: want one shared", in)
	}
	accepted := loopCounts(t, s)
	if accepted[0]+accepted[1] != 20 {
		t.Fatalf("accepted per loop %v, want 20 in all", accepted)
	}
}
