package origin

import (
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"golang.org/x/sys/unix"
)

// BenchmarkShortConnection measures one short connection through the
// front: connect from a trusted edge, v2 header and one byte, echo, close.
// `make bench` runs bench/front for the comparison with HAProxy; this is
// for profiling the front itself (go test -bench . -cpuprofile).
func BenchmarkShortConnection(b *testing.B) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	testbed.ServeConns(b, inner, func(c net.Conn) {
		var one [1]byte
		if _, err := io.ReadFull(c, one[:]); err == nil {
			c.Write(one[:])
			io.Copy(io.Discard, c)
		}
	})
	cfg := DefaultConfig()
	cfg.Inner = inner.Addr().String()
	cfg.TrustedEdges = []string{"127.0.0.2"}
	cfg.PerEdge = PerEdge{Rate: "0"} // one edge far past its default share: the front's own cost is measured
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	cfg.Listen = []string{ln.Addr().String()}
	f, err := New(cfg, NewPeerTable(), slog.New(slog.NewJSONHandler(io.Discard, nil)), nil)
	if err != nil {
		b.Fatal(err)
	}
	go f.Serve(ln)
	defer f.Shutdown(b.Context())
	msg := append(v2Header(b, "192.0.2.10:50000", "198.51.100.1:636", "edge-ams-1", "a1b2c3d4"), 'E')
	// IP_BIND_ADDRESS_NO_PORT leaves the port to connect, which may reuse
	// ports in TIME_WAIT: a bind to port 0 runs out of them after a few
	// ten thousand connections.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)},
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
			}); err != nil {
				return err
			}
			return serr
		}}
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		var one [1]byte
		for pb.Next() {
			c, err := d.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Error(err)
				return
			}
			c.Write(msg)
			io.ReadFull(c, one[:])
			c.Close()
		}
	})
}
