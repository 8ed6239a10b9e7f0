package testbed

import (
	"net"
	"testing"
	"time"
)

// Delay returns a loopback address that relays every connection to target
// holding each chunk of bytes for rtt/2 in each direction: a farther edge,
// since this kernel has no netem. Every round trip through it costs rtt
// more; the TCP connect itself is answered by the relay at once.
func Delay(t testing.TB, target string, rtt time.Duration) string {
	t.Helper()
	return DelayAt(t, "127.0.0.1:0", target, rtt)
}

// DelayAt is Delay listening on listen (ip:port), e.g. one address of an
// A set whose edges share a port.
func DelayAt(t testing.TB, listen, target string, rtt time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	return delay(t, ln, func() (net.Conn, error) { return net.DialTimeout("tcp", target, 5*time.Second) }, rtt)
}

// DelayIn is DelayAt inside namespace ns, dialing target from source (an
// address of ns; "" lets the kernel pick): a far link between two hosts of
// a namespace topology, e.g. an edge and its origin.
func DelayIn(t testing.TB, ns *Netns, listen, source, target string, rtt time.Duration) string {
	t.Helper()
	return delay(t, ns.Listen(listen), func() (net.Conn, error) { return ns.Dial(source, target, 5*time.Second) }, rtt)
}

func delay(t testing.TB, ln net.Listener, dial func() (net.Conn, error), rtt time.Duration) string {
	t.Helper()
	d := rtt / 2
	ServeConns(t, ln, func(c net.Conn) {
		up, err := dial()
		if err != nil {
			return
		}
		defer up.Close()
		done := make(chan struct{}, 2)
		go func() { delayCopy(up, c, d); done <- struct{}{} }()
		go func() { delayCopy(c, up, d); done <- struct{}{} }()
		<-done
	})
	return ln.Addr().String()
}

// delayCopy copies src to dst, each chunk d after it was read, in order:
// a reader goroutine stamps chunks, the writer waits out each stamp.
func delayCopy(dst, src net.Conn, d time.Duration) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 64)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{buf[:n], time.Now().Add(d)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	// Either side ending ends both: close what we write to, so the peer
	// sees EOF, and the source, so the reader goroutine returns.
	dst.Close()
	src.Close()
	for range ch {
	}
}
