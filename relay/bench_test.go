package relay

import (
	"io"
	"log/slog"
	"net"
	"testing"
)

// BenchmarkShortConnection measures one short connection through the
// edge: connect, one byte, the echo, close, with a v2 header toward a Go
// origin and one log line. `make bench` runs bench/edge for the
// comparison with HAProxy; this is for profiling the edge itself
// (go test -bench Short -cpuprofile / -memprofile ./relay).
func BenchmarkShortConnection(b *testing.B) {
	o := startOrigin(b, true, func(c originConn) {
		var one [1]byte
		if _, err := io.ReadFull(c, one[:]); err == nil {
			c.Write(one[:])
			io.Copy(io.Discard, c)
		}
	})
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the headers are not looked at here
		for {
			select {
			case <-o.headers:
			case <-stop:
				return
			}
		}
	}()
	cfg := DefaultConfig()
	cfg.Origins = OriginList(o.addr)
	e, err := New(cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), nil)
	if err != nil {
		b.Fatal(err)
	}
	lc := net.ListenConfig{KeepAlive: -1} // as cmd/edge listens: accepted sockets inherit keepalive
	ln, err := lc.Listen(b.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go e.Serve(ln)
	defer e.Shutdown(b.Context())
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		var one [1]byte
		for pb.Next() {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Error(err)
				return
			}
			c.Write([]byte{'E'})
			io.ReadFull(c, one[:])
			c.Close()
		}
	})
}
