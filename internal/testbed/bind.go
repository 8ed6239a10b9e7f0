package testbed

import (
	"context"
	"net"
	"strconv"
	"testing"
)

// BindAll listens on every address of listen as cmd/edge and cmd/origin
// do, each port replaced by one free on this host (the same free port for
// every address naming the same port), and fails the test when the kernel
// refuses one: a documented listen list such as [":636", "[::]:636"]
// (one dual-stack socket twice) is caught here. The listeners are closed
// before it returns.
func BindAll(t testing.TB, listen []string) {
	t.Helper()
	ports := map[string]string{}
	lc := net.ListenConfig{KeepAlive: -1}
	var open []net.Listener
	defer func() {
		for _, ln := range open {
			ln.Close()
		}
	}()
	for _, l := range listen {
		host, port, err := net.SplitHostPort(l)
		if err != nil {
			t.Fatalf("listen %q: %v", l, err)
		}
		if _, ok := ports[port]; !ok {
			free, err := net.Listen("tcp", ":0")
			if err != nil {
				t.Fatal(err)
			}
			ports[port] = strconv.Itoa(free.Addr().(*net.TCPAddr).Port)
			free.Close()
		}
		addr := net.JoinHostPort(host, ports[port])
		ln, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatalf("listen %q (as %s): %v", l, addr, err)
		}
		open = append(open, ln)
	}
}
