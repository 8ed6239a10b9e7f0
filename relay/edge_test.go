package relay

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/proxyheader"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/pires/go-proxyproto"
)

// stream is what one side of a connection sent or received.
type stream struct {
	sum [32]byte
	n   int64
	err error
}

// send writes n pseudo-random bytes (a fresh sequence per seed, so a
// reordered or repeated chunk changes the hash) and returns their hash.
func send(w io.Writer, seed byte, n int64) stream {
	gen := rand.NewChaCha8([32]byte{seed})
	h := sha256.New()
	buf := make([]byte, 256<<10)
	var s stream
	for s.n < n {
		b := buf[:min(int64(len(buf)), n-s.n)]
		gen.Read(b)
		h.Write(b)
		m, err := w.Write(b)
		s.n += int64(m)
		if err != nil {
			s.err = err
			break
		}
	}
	copy(s.sum[:], h.Sum(nil))
	return s
}

// recv reads r to EOF and returns the hash of what came.
func recv(r io.Reader) stream {
	h := sha256.New()
	var s stream
	s.n, s.err = io.Copy(h, r)
	copy(s.sum[:], h.Sum(nil))
	return s
}

func same(t *testing.T, what string, sent, got stream, want int64) {
	t.Helper()
	if sent.err != nil || got.err != nil {
		t.Fatalf("%s: send err %v, receive err %v", what, sent.err, got.err)
	}
	if sent.n != want || got.n != want || sent.sum != got.sum {
		t.Fatalf("%s: sent %d bytes, received %d, hashes equal: %v", what, sent.n, got.n, sent.sum == got.sum)
	}
}

// TestStream1GiBBothWays relays 1 GiB each way at once and checks both
// streams by hash, each side half-closing when it has sent everything.
func TestStream1GiBBothWays(t *testing.T) {
	const size = 1 << 30
	originGot, originSent := make(chan stream, 1), make(chan stream, 1)
	o := startOrigin(t, true, func(c originConn) {
		var wg sync.WaitGroup
		wg.Go(func() { originSent <- send(c, 2, size); c.CloseWrite() })
		originGot <- recv(c)
		wg.Wait()
	})
	e := startEdge(t, Config{Origins: OriginList(o.addr)})

	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	clientSent := make(chan stream, 1)
	go func() { clientSent <- send(c, 1, size); c.(*net.TCPConn).CloseWrite() }()
	clientGot := recv(c)

	same(t, "client to origin", <-clientSent, <-originGot, size)
	same(t, "origin to client", <-originSent, clientGot, size)

	line := e.waitLines(t, "connection closed", 1)[0]
	if line["bytes_up"] != float64(size) || line["bytes_down"] != float64(size) || line["reason"] != ResultEOF {
		t.Fatalf("log line %v", line)
	}
	for _, k := range []string{"id", "client", "origin", "bytes_up", "bytes_down", "duration", "reason"} { // docs/edge.md
		if _, ok := line[k]; !ok {
			t.Fatalf("log line without %s: %v", k, line)
		}
	}
	e.waitValue(t, size, "edgefleet_edge_bytes_total", "direction", "up")
	e.waitValue(t, size, "edgefleet_edge_bytes_total", "direction", "down")
}

// TestHalfClose checks that a side that has finished sending still
// receives everything the other side sends afterwards, in both orders.
func TestHalfClose(t *testing.T) {
	const size = 16 << 20
	for _, tc := range []struct {
		name        string
		clientFirst bool
	}{
		{"client finishes first", true},
		{"origin finishes first", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			originGot, originSent := make(chan stream, 1), make(chan stream, 1)
			o := startOrigin(t, true, func(c originConn) {
				if tc.clientFirst {
					originGot <- recv(c) // until the client's FIN
					originSent <- send(c, 2, size)
					c.CloseWrite()
					return
				}
				originSent <- send(c, 2, size)
				c.CloseWrite()
				originGot <- recv(c)
			})
			e := startEdge(t, Config{Origins: OriginList(o.addr)})
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var clientSent, clientGot stream
			if tc.clientFirst {
				clientSent = send(c, 1, size)
				c.(*net.TCPConn).CloseWrite()
				clientGot = recv(c)
			} else {
				clientGot = recv(c) // until the origin's FIN
				clientSent = send(c, 1, size)
				c.(*net.TCPConn).CloseWrite()
			}
			same(t, "client to origin", clientSent, <-originGot, size)
			same(t, "origin to client", <-originSent, clientGot, size)
			line := e.waitLines(t, "connection closed", 1)[0]
			if line["reason"] != ResultEOF {
				t.Fatalf("log line %v", line)
			}
		})
	}
}

// TestProxyHeader checks the header a Go origin (go-proxyproto) reads for
// each proxy_protocol setting: client as source, the edge's address as
// destination, and in v2 the logged id and the edge name as TLVs.
func TestProxyHeader(t *testing.T) {
	for _, version := range []string{ProxyV2, ProxyV1, ProxyOff} {
		t.Run(version, func(t *testing.T) {
			first := make(chan []byte, 1)
			o := startOrigin(t, version != ProxyOff, func(c originConn) {
				b := make([]byte, 5)
				io.ReadFull(c, b)
				first <- b
				c.Write([]byte("ok"))
			})
			e := startEdge(t, Config{Name: "edge-7", Origins: OriginList(o.addr), ProxyProtocol: version})
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "hello")
			io.ReadAll(c)
			c.Close()
			if b := <-first; string(b) != "hello" {
				t.Fatalf("payload after the header = %q", b)
			}
			line := e.waitLines(t, "connection closed", 1)[0]
			if line["client"] != c.LocalAddr().String() || line["origin"] != "o1" {
				t.Fatalf("log line %v", line)
			}
			if version == ProxyOff {
				return
			}
			h := <-o.headers
			src, dst, ok := h.TCPAddrs()
			if !ok || src.String() != c.LocalAddr().String() || dst.String() != e.addr {
				t.Fatalf("header %v: source %v destination %v, want %v %v", h.Version, src, dst, c.LocalAddr(), e.addr)
			}
			if int(h.Version) != int(version[1]-'0') {
				t.Fatalf("header version %d", h.Version)
			}
			if version == ProxyV1 {
				return
			}
			tlvs, err := h.TLVs()
			if err != nil {
				t.Fatal(err)
			}
			got := map[proxyproto.PP2Type]string{}
			for _, tlv := range tlvs {
				got[tlv.Type] = string(tlv.Value)
			}
			if got[proxyproto.PP2_TYPE_UNIQUE_ID] != line["id"] || len(got[proxyproto.PP2_TYPE_UNIQUE_ID]) < 16 {
				t.Fatalf("unique id TLV %q, logged id %v", got[proxyproto.PP2_TYPE_UNIQUE_ID], line["id"])
			}
			if got[proxyheader.TLVEdgeName] != "edge-7" {
				t.Fatalf("edge name TLV %q", got[proxyheader.TLVEdgeName])
			}
		})
	}
}

// TestUniqueIDs checks that every connection gets its own id.
func TestUniqueIDs(t *testing.T) {
	o := startOrigin(t, true, echo)
	e := startEdge(t, Config{Origins: OriginList(o.addr)})
	seen := map[string]bool{}
	for range 20 {
		roundTrip(t, e.addr, "x")
		tlvs, _ := (<-o.headers).TLVs()
		for _, tlv := range tlvs {
			if tlv.Type == proxyproto.PP2_TYPE_UNIQUE_ID {
				if seen[string(tlv.Value)] {
					t.Fatalf("id %q reused", tlv.Value)
				}
				seen[string(tlv.Value)] = true
			}
		}
	}
	if len(seen) != 20 {
		t.Fatalf("%d ids for 20 connections", len(seen))
	}
}

// TestOriginDown covers origins that refuse, black-hole, or are all down.
func TestOriginDown(t *testing.T) {
	const timeout = 300 * time.Millisecond
	refusedAddr := func(t testing.TB) string { return testbed.FreeAddr(t, "127.0.0.1") }
	for _, tc := range []struct {
		name    string
		first   func(t testing.TB) string
		allDown bool
	}{
		{"refused, next used", refusedAddr, false},
		{"black-holed, next used after connect_timeout", testbed.BlackHole, false},
		{"all down", refusedAddr, true},
		{"all black-holed", testbed.BlackHole, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := tc.first(t)
			second := tc.first(t)
			if !tc.allDown {
				second = startOrigin(t, true, echo).addr
			}
			e := startEdge(t, Config{Origins: OriginList(first, second), ConnectTimeout: timeout})
			t0 := time.Now()
			got, err := tryRoundTrip(t, e.addr, "ping")
			if err != nil && !tc.allDown {
				t.Fatal(err)
			}
			elapsed := time.Since(t0)

			if v := e.value(t, "edgefleet_edge_origin_up", "origin", "o1"); v != 0 {
				t.Fatalf("origin_up{%s} = %v after a failed connect, want 0", first, v)
			}
			blackHoled := strings.Contains(tc.name, "black")
			if blackHoled && elapsed < timeout {
				t.Fatalf("answered after %v, before connect_timeout %v", elapsed, timeout)
			}
			if tc.allDown {
				if got != "" {
					t.Fatalf("client got %q with every origin down", got)
				}
				// Promptly: one connect_timeout per origin, not TCP's own
				// connect timeout (minutes).
				if elapsed > 10*time.Second {
					t.Fatalf("client closed after %v", elapsed)
				}
				e.waitValue(t, 1, "edgefleet_edge_connections_total", "result", ResultNoOrigin)
				if v := e.value(t, "edgefleet_edge_origin_up", "origin", "o2"); v != 0 {
					t.Fatalf("origin_up{%s} = %v", second, v)
				}
				if n := len(e.logs.JSONLines("connection closed")); n != 0 {
					t.Fatalf("%d connection lines for a connection that carried nothing", n)
				}
				return
			}
			if got != "ping" {
				t.Fatalf("echo through the second origin = %q", got)
			}
			if line := e.waitLines(t, "connection closed", 1)[0]; line["origin"] != "o2" {
				t.Fatalf("relayed to %v, want o2 (%v)", line["origin"], second)
			}
			if off := e.logs.JSONLines("origin offline"); len(off) != 1 || off[0]["origin"] != "o1" {
				t.Fatalf("origin offline lines: %v", off)
			}
			// The OFFLINE origin is not tried again: the next connection goes
			// straight to the second one (one dial, counted, not timed).
			roundTrip(t, e.addr, "ping")
			e.waitValue(t, 2, "edgefleet_edge_connections_total", "result", ResultEOF)
			if n := e.value(t, "edgefleet_edge_origin_dial_seconds"); n != 3 {
				t.Fatalf("%v dial attempts, want 3", n)
			}
		})
	}
}

// TestOfflineRetry drives the OFFLINE window with an injected clock: an
// origin that failed is skipped for offline_retry even when it is back,
// then tried again; with every origin OFFLINE the least recently failed
// one is tried.
func TestOfflineRetry(t *testing.T) {
	const retry = time.Minute
	clock := testbed.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	aAddr := testbed.FreeAddr(t, "127.0.0.1")
	b := startOrigin(t, true, echo)
	e := startEdge(t, Config{Origins: []Origin{{Name: "a", Address: aAddr}, {Name: "b", Address: b.addr}}, OfflineRetry: retry},
		func(e *Edge) { e.Now = clock.Now })
	via := func() string {
		t.Helper()
		n := len(e.logs.JSONLines("connection closed"))
		if got := roundTrip(t, e.addr, "x"); got != "x" {
			t.Fatalf("echo = %q", got)
		}
		return e.waitLines(t, "connection closed", n+1)[n]["origin"].(string)
	}

	if got := via(); got != "b" { // A refused: OFFLINE from now
		t.Fatalf("first connection via %s", got)
	}
	ln, err := net.Listen("tcp", aAddr) // A is back, but still OFFLINE
	if err != nil {
		t.Fatalf("cannot listen again on %s: %v", aAddr, err)
	}
	startA := func() { serveOrigin(t, ln, true, echo) } // reads ln at call time
	startA()
	clock.Advance(retry - time.Second)
	if got := via(); got != "b" {
		t.Fatalf("within offline_retry: via %s, want %s", got, b.addr)
	}
	clock.Advance(time.Second)
	if got := via(); got != "a" {
		t.Fatalf("after offline_retry: via %s, want %s", got, aAddr)
	}
	if v := e.value(t, "edgefleet_edge_origin_up", "origin", "a"); v != 1 {
		t.Fatalf("origin_up{A} = %v after it answered", v)
	}

	// Both OFFLINE: A fails at t, B at t+10s; at t+20s (inside the window
	// of both) the least recently failed, A, is tried.
	ln.Close()
	if got := via(); got != "b" {
		t.Fatalf("with A gone: via %s", got)
	}
	clock.Advance(10 * time.Second)
	b.ln.Close()
	if got, _ := tryRoundTrip(t, e.addr, "x"); got != "" {
		t.Fatalf("with A OFFLINE and B gone: %q", got)
	}
	e.waitValue(t, 1, "edgefleet_edge_connections_total", "result", ResultNoOrigin)
	if ln, err = net.Listen("tcp", aAddr); err != nil {
		t.Fatalf("cannot listen again on %s: %v", aAddr, err)
	}
	startA()
	clock.Advance(10 * time.Second)
	if got := via(); got != "a" {
		t.Fatalf("all OFFLINE: via %s, want the least recently failed %s", got, aAddr)
	}
}

// TestMaxConns checks that the connection over max_conns is closed at once
// and counted, and that a freed slot is usable again.
func TestMaxConns(t *testing.T) {
	o := startOrigin(t, true, echo)
	e := startEdge(t, Config{Origins: OriginList(o.addr), MaxConns: 2})
	var open []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("a"))
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	e.waitValue(t, 2, "edgefleet_edge_connections_active")
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("third connection: read %d, %v; want it closed", n, err)
	}
	c.Close()
	e.waitValue(t, 1, "edgefleet_edge_connections_total", "result", ResultMaxConns)

	open[0].Close()
	e.waitValue(t, 1, "edgefleet_edge_connections_active")
	if got := roundTrip(t, e.addr, "again"); got != "again" {
		t.Fatalf("after a slot freed: %q", got)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestShutdown drains: new connections are refused at once, open ones go
// on until they finish, or are closed at drain_timeout.
func TestShutdown(t *testing.T) {
	for _, tc := range []struct {
		name   string
		finish bool // the client finishes within drain_timeout
		drain  time.Duration
	}{
		{"open connection finishes", true, 30 * time.Second},
		{"drain_timeout closes it", false, 200 * time.Millisecond},
		// Longer: the connection is idle and its loop parked
		// when drain_timeout closes it.
		{"drain_timeout closes an idle parked one", false, 600 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := startOrigin(t, true, echo)
			e := startEdge(t, Config{Origins: OriginList(o.addr), DrainTimeout: tc.drain})
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			b := make([]byte, 3)
			c.Write([]byte("one"))
			io.ReadFull(c, b)

			done := make(chan error, 1)
			go func() { done <- e.Shutdown(context.Background()) }()
			waitRefused(t, e.addr)
			if tc.finish {
				// Still relayed while draining.
				c.Write([]byte("two"))
				if _, err := io.ReadFull(c, b); err != nil || string(b) != "two" {
					t.Fatalf("during drain: %q, %v", b, err)
				}
				select {
				case <-done:
					t.Fatal("Shutdown returned with a connection open")
				case <-time.After(50 * time.Millisecond):
				}
				c.(*net.TCPConn).CloseWrite()
				io.ReadAll(c)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Shutdown: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Shutdown did not return")
			}
			want := ResultEOF
			if !tc.finish {
				want = ResultDrain
				if n, err := c.Read(b); err == nil {
					t.Fatalf("connection still open after drain_timeout: read %d", n)
				}
			}
			if line := e.waitLines(t, "connection closed", 1)[0]; line["reason"] != want {
				t.Fatalf("reason %v, want %s", line["reason"], want)
			}
		})
	}
}

func waitRefused(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting after Shutdown")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestZeroByteSilent: a connection that opens and closes without a byte
// (a health check) is counted but writes no log line.
func TestZeroByteSilent(t *testing.T) {
	o := startOrigin(t, true, echo)
	e := startEdge(t, Config{Origins: OriginList(o.addr)})
	for range 3 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	e.waitValue(t, 3, "edgefleet_edge_connections_total", "result", ResultEmpty)
	roundTrip(t, e.addr, "x")
	lines := e.waitLines(t, "connection closed", 1)
	if len(lines) != 1 || lines[0]["bytes_up"] != float64(1) {
		t.Fatalf("log lines %v, want only the one that carried a byte", lines)
	}
}

// TestMetricNames pins the metric names of docs/edge.md.
func TestMetricNames(t *testing.T) {
	o := startOrigin(t, true, echo)
	e := startEdge(t, Config{Origins: OriginList(o.addr)})
	roundTrip(t, e.addr, "x")
	e.waitValue(t, 1, "edgefleet_edge_connections_total", "result", ResultEOF)
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		got[mf.GetName()] = mf.GetType().String() + fmt.Sprint(labels)
	}
	want := map[string]string{
		"edgefleet_edge_connections_active":  "GAUGE[]",
		"edgefleet_edge_connections_total":   "COUNTER[result]",
		"edgefleet_edge_bytes_total":         "COUNTER[direction]",
		"edgefleet_edge_origin_dial_seconds": "HISTOGRAM[]",
		"edgefleet_edge_origin_up":           "GAUGE[origin]",
		// Clients refused for a PROXY header of their own.
		"edgefleet_edge_client_proxy_headers_total": "COUNTER[]",
		// Keys the admission tables hold (limits).
		"edgefleet_edge_limit_table_entries": "GAUGE[table]",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("metrics\n got %v\nwant %v", got, want)
	}
}

// TestSetOrigins switches new connections to a new origin list and drops
// the gauge of a removed origin.
func TestSetOrigins(t *testing.T) {
	a := startOrigin(t, true, func(c originConn) { c.Write([]byte("a")) })
	b := startOrigin(t, true, func(c originConn) { c.Write([]byte("b")) })
	e := startEdge(t, Config{Origins: []Origin{{Name: "a", Address: a.addr}}})
	if got := roundTrip(t, e.addr, "x"); got != "a" {
		t.Fatalf("before: %q", got)
	}
	e.SetOrigins([]Origin{{Name: "b", Address: b.addr}})
	if got := roundTrip(t, e.addr, "x"); got != "b" {
		t.Fatalf("after: %q", got)
	}
	if v := e.metric(t, "edgefleet_edge_origin_up", "origin", "a"); v != nil {
		t.Fatal("origin_up still has the removed origin")
	}
	if v := e.value(t, "edgefleet_edge_origin_up", "origin", "b"); v != 1 {
		t.Fatalf("origin_up{new} = %v", v)
	}
}

func TestValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Origins = OriginList("origin.example:8636")
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"defaults with origins", func(*Config) {}, ""},
		{"no origins", func(c *Config) { c.Origins = nil }, "origins: at least one"},
		{"origin without port", func(c *Config) { c.Origins = OriginList("10.0.0.1") }, `origins: "10.0.0.1" is not host:port`},
		{"origin without host", func(c *Config) { c.Origins = OriginList(":8636") }, `origins: ":8636" has no host`},
		{"origin bad port", func(c *Config) { c.Origins = OriginList("a:99999") }, `"a:99999": port 99999 is outside 1-65535`},
		{"origin twice", func(c *Config) { c.Origins = OriginList("a:1", "a:1") }, "listed twice"},
		{"ipv6 origin", func(c *Config) { c.Origins = OriginList("[::1]:8636") }, ""},
		{"named origins", func(c *Config) { c.Origins = []Origin{{Name: "par-1", Address: "a:1"}, {Address: "b:1"}} }, ""},
		{"origin name an address", func(c *Config) { c.Origins = []Origin{{Name: "10.1.2.3", Address: "a:1"}} }, `origins[0].name: "10.1.2.3" may hold only letters, digits, '-' and '_' (a name, never an address)`},
		{"origin name a host name", func(c *Config) { c.Origins = []Origin{{Address: "b:1"}, {Name: "origin.example.net", Address: "a:1"}} }, `origins[1].name: "origin.example.net" may hold only`},
		{"origin name too long", func(c *Config) { c.Origins = []Origin{{Name: strings.Repeat("o", 64), Address: "a:1"}} }, `must be 1-63 characters`},
		{"origin names twice", func(c *Config) { c.Origins = []Origin{{Name: "x", Address: "a:1"}, {Name: "x", Address: "b:1"}} }, `origins[1].name: "x" is the name of another origin`},
		{"origin name taken by position", func(c *Config) { c.Origins = []Origin{{Address: "a:1"}, {Name: "o1", Address: "b:1"}} }, `origins[1].name: "o1" is the name of another origin`},
		{"no listen", func(c *Config) { c.Listen = nil }, "listen: at least one"},
		{"bad listen", func(c *Config) { c.Listen = []string{"636"} }, `listen: "636" is not host:port`},
		{"proxy v3", func(c *Config) { c.ProxyProtocol = "v3" }, `proxy_protocol: "v3" is not v2, v1 or off`},
		{"proxy v1", func(c *Config) { c.ProxyProtocol = "v1" }, ""},
		{"proxy off", func(c *Config) { c.ProxyProtocol = "off" }, ""},
		{"zero connect timeout", func(c *Config) { c.ConnectTimeout = 0 }, "connect_timeout: 0s must be positive"},
		{"negative offline retry", func(c *Config) { c.OfflineRetry = -time.Second }, "offline_retry"},
		{"zero max conns", func(c *Config) { c.MaxConns = 0 }, "max_conns: 0 must be positive"},
		{"negative drain", func(c *Config) { c.DrainTimeout = -1 }, "drain_timeout"},
		{"negative keepalive", func(c *Config) { c.Keepalive = -1 }, "keepalive"},
		{"zero keepalive disables", func(c *Config) { c.Keepalive = 0 }, ""},
		{"empty name", func(c *Config) { c.Name = "" }, "name: must not be empty"},
		{"name with space", func(c *Config) { c.Name = "edge one" }, "name:"},
		{"long name", func(c *Config) { c.Name = strings.Repeat("x", 256) }, "name: longer than 255"},
		// An origin that is the edge itself, in any spelling.
		{"origin is the listen address", func(c *Config) { c.Listen = []string{"127.0.0.1:636"}; c.Origins = OriginList("127.0.0.1:636") },
			`origins: "127.0.0.1:636" is the edge's own listen address "127.0.0.1:636": every connection would be relayed to itself`},
		{"origin localhost", func(c *Config) { c.Listen = []string{"127.0.0.1:636"}; c.Origins = OriginList("localhost:636") },
			`origins: "localhost:636" is the edge's own listen address "127.0.0.1:636"`},
		{"origin v4-mapped", func(c *Config) {
			c.Listen = []string{"127.0.0.1:636"}
			c.Origins = OriginList("[::ffff:127.0.0.1]:636")
		},
			`origins: "[::ffff:127.0.0.1]:636" is the edge's own listen address "127.0.0.1:636"`},
		{"origin loopback under a wildcard listen", func(c *Config) { c.Listen = []string{"0.0.0.0:636"}; c.Origins = OriginList("127.0.0.1:636") },
			`origins: "127.0.0.1:636" is the edge's own listen address "0.0.0.0:636"`},
		{"origin 0.0.0.0", func(c *Config) { c.Listen = []string{"127.0.0.1:636"}; c.Origins = OriginList("0.0.0.0:636") },
			`origins: "0.0.0.0:636" is the edge's own listen address "127.0.0.1:636"`},
		{"origin on another port", func(c *Config) { c.Listen = []string{"0.0.0.0:636"}; c.Origins = OriginList("127.0.0.1:637") }, ""},
		{"origin on another loopback address", func(c *Config) { c.Listen = []string{"127.0.0.2:636"}; c.Origins = OriginList("127.0.0.1:636") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			err := c.Validate()
			if err == nil {
				err = c.CheckSelf()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestLoopCutAtRunTime: an edge whose origin turns out
// to be itself (here set at run time, where the start check cannot see
// it) relays one connection to itself, recognises the connection that
// comes back from its own origin socket, closes it and counts it, instead
// of chaining until the file descriptors run out.
func TestLoopCutAtRunTime(t *testing.T) {
	other := startOrigin(t, true, echo)
	e := startEdge(t, Config{Origins: OriginList(other.addr)})
	e.SetOrigins(OriginList(e.addr))
	for i := 1; i <= 20; i++ {
		if got, _ := tryRoundTrip(t, e.addr, "x"); got != "" {
			t.Fatalf("a looped connection answered %q", got)
		}
	}
	e.waitValue(t, 0, "edgefleet_edge_connections_active")
	if n := e.value(t, "edgefleet_edge_connections_total", "result", ResultLoop); n < 20 {
		t.Fatalf("%v loops counted for 20 clients", n)
	}
	// A client connection and its hop back, now and then one hop more when
	// the hop was accepted before its origin socket was recorded (then the
	// origin side cuts it): never a chain.
	var ended float64
	for _, r := range results {
		ended += e.value(t, "edgefleet_edge_connections_total", "result", r)
	}
	if ended > 60 {
		t.Fatalf("%v connections for 20 clients: the loop chained", ended)
	}
	if lines := e.logs.JSONLines("connection from the edge itself refused: an origin is this edge"); len(lines) == 0 {
		t.Fatalf("no log line for the loop; log:\n%s", e.logs.String())
	}
	e.SetOrigins(OriginList(other.addr))
	if got := roundTrip(t, e.addr, "back"); got != "back" {
		t.Fatalf("after the origin was fixed: %q", got)
	}
}

// TestOneRetryAtATime: while a connection retries an
// OFFLINE origin (a black hole: the attempt lasts connect_timeout), every
// other new client takes the next selectable origin at once instead of
// joining the retry. The OFFLINE window runs on the injected clock.
func TestOneRetryAtATime(t *testing.T) {
	clock := testbed.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	hole := testbed.BlackHole(t)
	good := startOrigin(t, true, echo)
	e := startEdge(t, Config{Origins: OriginList(hole, good.addr), ConnectTimeout: time.Minute, OfflineRetry: time.Minute},
		func(e *Edge) { e.Now = clock.Now })
	plan, claim := e.orig.plan(clock.Now()) // the black hole failed once: OFFLINE
	e.orig.fail(plan[0], clock.Now())
	e.orig.release(plan, claim)
	clock.Advance(time.Minute) // its offline_retry is over: the next client retries it

	retrier, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer retrier.Close()
	e.waitValue(t, 1, "edgefleet_edge_connections_active")
	deadline := time.Now().Add(10 * time.Second)
	for !e.retrying(hole) {
		if time.Now().After(deadline) {
			t.Fatal("the first client never started the retry of the OFFLINE origin")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 5 { // each would wait a minute on the black hole before the fix
		if got := roundTrip(t, e.addr, "x"); got != "x" {
			t.Fatalf("client %d: %q", i, got)
		}
	}
	if !e.retrying(hole) {
		t.Fatal("the retry ended before the other clients were served: the test proves nothing")
	}
	lines := e.waitLines(t, "connection closed", 5)
	for _, l := range lines {
		if l["origin"] != "o2" {
			t.Fatalf("a client went to %v during the retry, want o2 (%s)", l["origin"], good.addr)
		}
	}
	if n := e.value(t, "edgefleet_edge_origin_dial_seconds"); n != 5 {
		t.Fatalf("%v finished dials, want the 5 to the good origin (the retry still in flight)", n)
	}
}

// retrying reports whether a plan holds the retry of addr.
func (te *testEdge) retrying(addr string) bool {
	te.orig.mu.Lock()
	defer te.orig.mu.Unlock()
	for _, o := range te.orig.list {
		if o.addr == addr {
			return o.claim != 0
		}
	}
	return false
}

// TestRemovedOriginSeriesStaysGone: a dial under way when SIGHUP's
// SetOrigins removes its origin ends after the removal; its failure (the
// origin going OFFLINE) must not bring back the removed origin's
// edgefleet_edge_origin_up series, which it did when the gauge was set
// after the origin set's lock was released.
func TestRemovedOriginSeriesStaysGone(t *testing.T) {
	hole := testbed.BlackHole(t)
	good := startOrigin(t, true, echo)
	e := startEdge(t, Config{Origins: []Origin{{Name: "hole", Address: hole}}, ConnectTimeout: 500 * time.Millisecond})
	c, err := net.Dial("tcp", e.addr) // its dial to the black hole is under way
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e.waitValue(t, 1, "edgefleet_edge_connections_active")
	e.SetOrigins([]Origin{{Name: "good", Address: good.addr}})
	if v := e.metric(t, "edgefleet_edge_origin_up", "origin", "hole"); v != nil {
		t.Fatalf("origin_up for the removed origin right after SetOrigins: %v", *v)
	}
	e.waitValue(t, 0, "edgefleet_edge_connections_active") // the dial timed out
	if v := e.metric(t, "edgefleet_edge_origin_up", "origin", "hole"); v != nil {
		t.Fatalf("the removed origin's series came back (%v) when its dial failed", *v)
	}
	if v := e.metric(t, "edgefleet_edge_origin_up", "origin", "good"); v == nil || *v != 1 {
		t.Fatalf("origin_up for the new origin: %v", v)
	}
}
