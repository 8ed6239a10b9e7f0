package testbed

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// TestDelay: every round trip through the relay takes at least its rtt,
// bytes arrive whole and in order both ways, and a close reaches the
// other side.
func TestDelay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ServeConns(t, ln, func(c net.Conn) { // a line echo
		r := bufio.NewReader(c)
		for {
			l, err := r.ReadString('\n')
			if err != nil || l == "bye\n" {
				return
			}
			c.Write([]byte(l))
		}
	})
	const rtt = 40 * time.Millisecond
	c, err := net.Dial("tcp", Delay(t, ln.Addr().String(), rtt))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	for _, msg := range []string{"one\n", "two\n", "three\n"} {
		start := time.Now()
		c.Write([]byte(msg))
		got, err := r.ReadString('\n')
		if err != nil || got != msg {
			t.Fatalf("echo of %q: %q %v", msg, got, err)
		}
		if took := time.Since(start); took < rtt {
			t.Fatalf("a round trip took %v, less than the relay's %v", took, rtt)
		}
	}
	c.Write([]byte("bye\n")) // the server closes: the client sees EOF
	if got, err := r.ReadString('\n'); err != io.EOF {
		t.Fatalf("after the server closed: %q %v, want EOF", got, err)
	}
}
