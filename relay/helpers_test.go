package relay

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/evloop"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/pires/go-proxyproto"
	"github.com/prometheus/client_golang/prometheus"
)

// testEdge is an Edge serving on a loopback listener, with its log lines
// and metrics at hand.
type testEdge struct {
	*Edge
	addr string
	reg  *prometheus.Registry
	logs *testbed.Buffer
}

func startEdge(t *testing.T, cfg Config, tweak ...func(*Edge)) *testEdge {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "edge-test"
	}
	def := DefaultConfig()
	if cfg.Listen == nil {
		cfg.Listen = []string{"127.0.0.1:0"}
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = def.ConnectTimeout
	}
	if cfg.OfflineRetry == 0 {
		cfg.OfflineRetry = def.OfflineRetry
	}
	if cfg.ProxyProtocol == "" {
		cfg.ProxyProtocol = def.ProxyProtocol
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = def.MaxConns
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = def.DrainTimeout
	}
	logs := &testbed.Buffer{}
	reg := prometheus.NewRegistry()
	e, err := New(cfg, slog.New(slog.NewJSONHandler(logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tweak {
		f(e)
	}
	ln, err := evloop.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveEdgeOn(t, e, reg, logs, ln)
}

// serveEdge is startEdge on a listener of the test's (cfg as given, no
// defaults filled in but the name).
func serveEdge(t *testing.T, cfg Config, ln net.Listener) *testEdge {
	t.Helper()
	def := DefaultConfig()
	def.Name, def.Listen, def.Origins, def.Limits = "edge-test", []string{ln.Addr().String()}, cfg.Origins, cfg.Limits
	def.MaxConns = cfg.Limits.TableSize
	logs := &testbed.Buffer{}
	reg := prometheus.NewRegistry()
	e, err := New(def, slog.New(slog.NewJSONHandler(logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	return serveEdgeOn(t, e, reg, logs, ln)
}

func serveEdgeOn(t *testing.T, e *Edge, reg *prometheus.Registry, logs *testbed.Buffer, ln net.Listener) *testEdge {
	served := make(chan error, 1)
	go func() { served <- e.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.Shutdown(ctx)
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testEdge{Edge: e, addr: ln.Addr().String(), reg: reg, logs: logs}
}

// metric returns the value of the series name with exactly the given
// labels (name, value pairs), nil when it does not exist
// (testbed.Metric: a histogram's value is its sample count).
func (te *testEdge) metric(t *testing.T, name string, labels ...string) *float64 {
	t.Helper()
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	if v, ok := testbed.Metric(t, te.reg, name, want); ok {
		return &v
	}
	return nil
}

// value is metric() for a series that must exist.
func (te *testEdge) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v := te.metric(t, name, labels...)
	if v == nil {
		t.Fatalf("no series %s%v", name, labels)
	}
	return *v
}

// waitValue polls until the metric reaches want (connections are counted
// after the client has already seen its close).
func (te *testEdge) waitValue(t *testing.T, want float64, name string, labels ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := te.metric(t, name, labels...)
		if v != nil && *v == want {
			return
		}
		if time.Now().After(deadline) {
			got := "none"
			if v != nil {
				got = strconv.FormatFloat(*v, 'g', -1, 64)
			}
			t.Fatalf("%s%v = %s, want %v; log:\n%s", name, labels, got, want, te.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitLines waits until n lines with msg were logged and returns them.
func (te *testEdge) waitLines(t *testing.T, msg string, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := te.logs.JSONLines(msg)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %q log lines, want %d; log:\n%s", len(got), msg, n, te.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testOrigin is a Go origin on loopback that reads the PROXY header (when
// the edge sends one) and then hands the connection to handle.
type testOrigin struct {
	ln      net.Listener
	addr    string
	headers chan *proxyproto.Header
}

// originConn is what handle gets: reads go through the buffered reader
// that parsed the header. The socket is not embedded, so io.Copy cannot
// reach past the buffer through (*net.TCPConn).WriteTo.
type originConn struct {
	tcp *net.TCPConn
	r   *bufio.Reader
}

func (c originConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c originConn) Write(p []byte) (int, error) { return c.tcp.Write(p) }
func (c originConn) CloseWrite() error           { return c.tcp.CloseWrite() }

func startOrigin(t testing.TB, withHeader bool, handle func(c originConn)) *testOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOrigin(t, ln, withHeader, handle)
}

func serveOrigin(t testing.TB, ln net.Listener, withHeader bool, handle func(c originConn)) *testOrigin {
	o := &testOrigin{ln: ln, addr: ln.Addr().String(), headers: make(chan *proxyproto.Header, 100)}
	testbed.ServeConns(t, ln, func(c net.Conn) {
		oc := originConn{c.(*net.TCPConn), bufio.NewReaderSize(c, 64<<10)}
		if withHeader {
			h, err := proxyproto.Read(oc.r)
			if err != nil {
				return
			}
			o.headers <- h
		}
		handle(oc)
	})
	return o
}

// echo copies everything back and half-closes when the client does.
func echo(c originConn) {
	io.Copy(c.tcp, c.r)
	c.CloseWrite()
}

// roundTrip connects through the edge, sends msg, half-closes and returns
// everything the far side sent back.
func roundTrip(t *testing.T, addr, msg string) string {
	t.Helper()
	got, err := tryRoundTrip(t, addr, msg)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// tryRoundTrip is roundTrip for a connection that may be reset: an edge
// that closes a client whose bytes it never read makes the kernel send RST.
func tryRoundTrip(t *testing.T, addr, msg string) (string, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	if isTimeout(err) {
		t.Fatal(err)
	}
	return string(b), err
}
