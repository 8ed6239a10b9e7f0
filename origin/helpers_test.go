package origin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/evloop"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/prometheus/client_golang/prometheus"
)

// harness is a front on 127.0.0.1 forwarding to an inner echo service that
// looks itself up in the peer table, with its log and metrics captured.
type harness struct {
	t     *testing.T
	cfg   Config
	front *Front
	table *PeerTable
	reg   *prometheus.Registry
	logs  *testbed.Buffer
	addr  string // the front's address
	inner *echoInner
	clock *testbed.Clock // the front's: real time until frozen
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	return newHarnessWith(t, "127.0.0.1", nil, mod)
}

// newHarnessWith listens on ip and forwards to the inner service that
// startInner starts on the front's table (nil: an echoInner).
func newHarnessWith(t *testing.T, ip string, startInner func(*PeerTable) string, mod func(*Config)) *harness {
	t.Helper()
	ln, err := evloop.Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	return newHarnessOn(t, ln, startInner, mod)
}

// newHarnessOn is newHarnessWith on a listener of the caller's (one in a
// network namespace).
func newHarnessOn(t *testing.T, ln net.Listener, startInner func(*PeerTable) string, mod func(*Config)) *harness {
	t.Helper()
	if _, checked := leakChecked.LoadOrStore(t, true); !checked {
		// Registered before the first harness's own cleanup: runs after
		// every harness of the test has shut down.
		t.Cleanup(func() { leakChecked.Delete(t); noFrontGoroutines(t) })
	}
	h := &harness{t: t, table: NewPeerTable(), reg: prometheus.NewRegistry(), logs: &testbed.Buffer{}}
	h.cfg = DefaultConfig()
	if startInner != nil {
		h.cfg.Inner = startInner(h.table)
	} else {
		h.inner = startEchoInner(t, h.table)
		h.cfg.Inner = h.inner.addr
	}
	h.cfg.TrustedEdges = []string{"127.0.0.2"}
	h.cfg.HeaderTimeout = time.Minute // the timeout's own test (TestHeaderTimeoutRealSockets) shortens it
	if mod != nil {
		mod(&h.cfg)
	}
	h.addr = ln.Addr().String()
	h.cfg.Listen = []string{h.addr}
	var err error
	h.front, err = New(h.cfg, h.table, slog.New(slog.NewJSONHandler(h.logs, nil)), h.reg)
	if err != nil {
		t.Fatal(err)
	}
	h.clock = testbed.RealClock()
	h.front.Now = h.clock.Now
	served := make(chan error, 1)
	go func() { served <- h.front.Serve(ln) }()
	t.Cleanup(func() {
		// Every client of the test has been closed by now (their cleanups
		// ran first): the connections must end and their entries go
		// without a forced shutdown.
		if !t.Failed() {
			h.settled()
		}
		h.front.Shutdown(t.Context())
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if n := h.table.Len(); n != 0 {
			t.Errorf("%d peer table entries left after shutdown: %v", n, h.table.Peers())
		}
		if t.Failed() {
			t.Logf("front log:\n%s", h.logs.String())
		}
	})
	return h
}

// leakChecked holds the tests whose goroutine check is registered.
var leakChecked sync.Map

// noFrontGoroutines fails the test when, after Shutdown, a goroutine is
// still running the front's code: a session, the accept loop, or a Lookup
// waiting for a dial that never settles. (splice's idle workers are
// reused by later connections by design and are not counted.)
func noFrontGoroutines(t testing.TB) {
	t.Helper()
	var stuck []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		stuck = stuck[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, fn := range []string{"origin.(*Front).", "origin.(*session).", "origin.(*PeerTable).Lookup"} {
				if strings.Contains(g, fn) && !strings.Contains(g, "origin.noFrontGoroutines") {
					stuck = append(stuck, g)
					break
				}
			}
		}
		if len(stuck) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(stuck) > 0 {
		t.Errorf("%d goroutines of the front left after shutdown:\n%s", len(stuck), strings.Join(stuck, "\n\n"))
	}
}

// dialFrom connects to the front from source address ip (any of 127/8).
func (h *harness) dialFrom(ip string) *net.TCPConn {
	h.t.Helper()
	return dialFrom(h.t, ip, h.addr)
}

func dialFrom(t testing.TB, ip, addr string) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if ip != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(ip)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// echoInner is the inner service of the tests: on accept it looks up its
// client's remote port in the peer table; at the client's first bytes it
// answers with the Peer as one JSON line ({"inner_port":0} when missing),
// then echoes everything it receives.
type echoInner struct {
	addr     string
	mu       sync.Mutex
	accepted int
}

func startEchoInner(t testing.TB, table *PeerTable) *echoInner {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	e := &echoInner{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.accepted++
			e.mu.Unlock()
			go func() {
				defer c.Close()
				p, _ := table.LookupAddr(c.RemoteAddr().(*net.TCPAddr).AddrPort())
				// Like LDAP, the client speaks first: a health check
				// that sends nothing gets nothing.
				first := make([]byte, 64<<10)
				n, err := c.Read(first)
				if n == 0 || err != nil && err != io.EOF {
					return
				}
				b, _ := json.Marshal(p)
				c.Write(append(append(b, '\n'), first[:n]...))
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return e
}

func (e *echoInner) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.accepted
}

// roundTrip sends prefix+payload on c, reads the inner's Peer line and the
// echoed payload, and returns the Peer.
func roundTrip(t testing.TB, c net.Conn, prefix, payload []byte) Peer {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(append(append([]byte{}, prefix...), payload...)); err != nil {
		t.Fatalf("write: %v", err)
	}
	r := bufio.NewReader(c)
	p := readPeer(t, r)
	echo := make([]byte, len(payload))
	if _, err := io.ReadFull(r, echo); err != nil {
		t.Fatalf("read echo: %v", err)
	}
	if !bytes.Equal(echo, payload) {
		t.Fatalf("echo = %q, want %q", echo, payload)
	}
	return p
}

// readPeer reads the inner test service's first line: the Peer it found
// in the table for the connection.
func readPeer(t testing.TB, r *bufio.Reader) Peer {
	t.Helper()
	line, err := r.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read peer line: %v", err)
	}
	var p Peer
	if err := json.Unmarshal(line, &p); err != nil {
		t.Fatalf("peer line %q: %v", line, err)
	}
	return p
}

// expectClosed checks that the front closes c without forwarding anything.
func expectClosed(t testing.TB, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if len(b) > 0 {
		t.Fatalf("got %q from a connection that should have been closed", b)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("connection still open after 10s")
	}
}

// eventually polls cond until it holds, for connections the front closes
// asynchronously after the client's side has finished.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settled waits until the front holds no connection and the table is empty.
func (h *harness) settled() {
	h.t.Helper()
	eventually(h.t, "no active connection and an empty peer table", func() bool {
		return h.metric("edgefleet_origin_connections_active", nil) == 0 && h.table.Len() == 0 &&
			h.metric("edgefleet_origin_peer_table_entries", nil) == 0
	})
}

// counted is the sum of edgefleet_origin_connections_total over all its
// series: every connection the front accepted and saw end or start
// forwarding.
func (h *harness) counted() float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "edgefleet_origin_connections_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// metric returns the value of the series of name with exactly labels
// (0 when absent).
func (h *harness) metric(name string, labels map[string]string) float64 {
	h.t.Helper()
	return metricValue(h.t, h.reg, name, labels)
}

func metricValue(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	v, _ := testbed.Metric(t, reg, name, labels)
	return v
}

func conns(header, result string) (string, map[string]string) {
	return "edgefleet_origin_connections_total", map[string]string{"header": header, "result": result}
}

func hostOf(t testing.TB, addr string) string {
	t.Helper()
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	return h
}
