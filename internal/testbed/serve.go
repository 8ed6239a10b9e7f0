package testbed

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// ServeConns accepts on ln and runs handle for each connection in its
// own goroutine, closing the connection when handle returns: a scripted
// peer (a misbehaving server, a recorder). t.Cleanup closes ln and waits
// for the handlers, so none outlives the test.
func ServeConns(t testing.TB, ln net.Listener, handle func(net.Conn)) {
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		serve(ln, handle, &wg)
	}()
}

// ServeHeld is ServeConns for a peer whose handlers may block on their
// connection (a nil handle only holds each connection, reading nothing:
// a hung server): t.Cleanup closes ln and every connection still open,
// then waits for the handlers.
func ServeHeld(t testing.TB, ln net.Listener, handle func(net.Conn)) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	hold := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			c.Close()
			return false
		}
		conns = append(conns, c)
		return true
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !hold(c) || handle == nil {
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); handle(c) }()
		}
	}()
}

// serve accepts on ln until it is closed and runs handle for each
// connection in its own goroutine, closing the connection when handle
// returns; wg, when set, counts those goroutines.
func serve(ln net.Listener, handle func(net.Conn), wg *sync.WaitGroup) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if wg != nil {
			wg.Add(1)
		}
		go func() {
			if wg != nil {
				defer wg.Done()
			}
			defer c.Close()
			handle(c)
		}()
	}
}

// echo sends back what c sends until it ends.
func echo(c net.Conn) { io.Copy(c, c) }

// TCPPair returns the two ends of a loopback TCP connection (the dialled
// end first), closed when the test ends.
func TCPPair(t testing.TB) (dialled, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// EchoTCP starts a loopback TCP echo server, closed when the test ends,
// and returns its address: each connection gets back what it sends and
// then EOF once it half-closes.
func EchoTCP(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ServeConns(t, ln, func(c net.Conn) {
		echo(c)
		c.(*net.TCPConn).CloseWrite()
	})
	return ln.Addr().String()
}

// DialFrom connects to to from the local address src (an edge, trusted
// or not, on loopback or in a namespace the test entered), with a 20 s
// deadline on the connection, closed when the test ends.
func DialFrom(t testing.TB, src, to string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}
