package origin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/loglimit"
	"github.com/edgefleet/edgefleet/internal/proxyheader"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/prometheus/client_golang/prometheus"
)

var payload = []byte("\x30\x0c\x02\x01\x01\x60\x07\x02\x01\x03\x04\x00\x80\x00 and more bytes")

func TestForward(t *testing.T) {
	h := newHarness(t, nil)
	tests := []struct {
		name     string
		from     string
		prefix   []byte // the header
		data     []byte // sent before payload, not a header
		header   string
		claimed  string
		edge, id string
	}{
		{name: "v2 from trusted edge", from: "127.0.0.2",
			prefix: v2Header(t, "192.0.2.10:50000", "198.51.100.1:636", "edge-ams-1", "a1b2c3d4"),
			header: HeaderV2, claimed: "192.0.2.10:50000", edge: "edge-ams-1", id: "a1b2c3d4"},
		{name: "v2 ipv6 client", from: "127.0.0.2",
			prefix: v2Header(t, "[2001:db8::7]:443", "[2001:db8::1]:636", "edge-fra-2", ""),
			header: HeaderV2, claimed: "[2001:db8::7]:443", edge: "edge-fra-2"},
		{name: "v1 from trusted edge", from: "127.0.0.2",
			prefix: []byte("PROXY TCP4 192.0.2.11 198.51.100.1 40000 636\r\n"),
			header: HeaderV1, claimed: "192.0.2.11:40000"},
		{name: "v2 local", from: "127.0.0.2", prefix: v2Raw(0x20, 0x00, 0, nil), header: HeaderLocal},
		{name: "v1 unknown", from: "127.0.0.2", prefix: []byte("PROXY UNKNOWN\r\n"), header: HeaderLocal},
		{name: "no header from trusted edge", from: "127.0.0.2", header: HeaderNone},
		{name: "no header from elsewhere", from: "127.0.0.5", header: HeaderNone},
		{name: "tls hello from elsewhere", from: "127.0.0.6", data: clientHello, header: HeaderNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := h.dialFrom(tt.from)
			p := roundTrip(t, c, tt.prefix, append(append([]byte{}, tt.data...), payload...))
			want := Peer{InnerPort: p.InnerPort, Claimed: tt.claimed, Measured: c.LocalAddr().String(),
				Edge: tt.edge, ID: tt.id, Header: tt.header, Since: p.Since}
			if p != want || p.InnerPort == 0 || p.Since.IsZero() {
				t.Fatalf("inner saw %+v, want %+v", p, want)
			}
			c.Close()
			h.settled()

			var line map[string]any
			for _, l := range h.logs.JSONLines("connection closed") {
				if l["inner_port"] == float64(p.InnerPort) {
					line = l
				}
			}
			if line == nil {
				t.Fatalf("no log line for inner port %d", p.InnerPort)
			}
			keys := slices.Sorted(maps.Keys(line))
			wantKeys := []string{"bytes_down", "bytes_up", "claimed", "duration", "edge", "header", "id", "inner_port", "level", "measured", "msg", "reason", "time"}
			if !reflect.DeepEqual(keys, wantKeys) {
				t.Fatalf("log keys %v, want %v", keys, wantKeys)
			}
			if line["claimed"] != tt.claimed || line["measured"] != want.Measured || line["header"] != tt.header ||
				line["edge"] != tt.edge || line["id"] != tt.id || line["reason"] != "eof" ||
				line["bytes_up"] != float64(len(tt.data)+len(payload)) {
				t.Fatalf("log line %v", line)
			}
		})
	}
	for header, n := range map[string]float64{HeaderV2: 2, HeaderV1: 1, HeaderLocal: 2, HeaderNone: 3} {
		if got := h.metric(conns(header, ResultOK)); got != n {
			t.Errorf("connections_total{header=%s,result=ok} = %v, want %v", header, got, n)
		}
	}
}

func TestSpoofedHeaders(t *testing.T) {
	h := newHarness(t, nil)
	for _, prefix := range [][]byte{
		v2Header(t, "192.0.2.66:1", "198.51.100.1:636", "evil", ""),
		[]byte("PROXY TCP4 192.0.2.66 198.51.100.1 1 636\r\n"),
		v2Raw(0x20, 0x00, 0, nil),
	} {
		c := h.dialFrom("127.0.0.3")
		c.Write(append(prefix, payload...))
		expectClosed(t, c)
	}
	h.settled()
	if got := h.metric("edgefleet_origin_spoofed_headers_total", nil); got != 3 {
		t.Errorf("spoofed_headers_total = %v, want 3", got)
	}
	if a, b := h.metric(conns(HeaderV2, ResultSpoofed)), h.metric(conns(HeaderV1, ResultSpoofed)); a != 2 || b != 1 {
		t.Errorf("connections_total spoofed v2=%v v1=%v, want 2, 1", a, b)
	}
	if n := h.inner.count(); n != 0 {
		t.Errorf("inner was dialled %d times for spoofed headers", n)
	}
	lines := h.logs.JSONLines("spoofed proxy header")
	if len(lines) != 3 || hostOf(t, lines[0]["measured"].(string)) != "127.0.0.3" || lines[0]["reason"] != ResultSpoofed {
		t.Errorf("spoof log lines: %v", lines)
	}
	if len(h.logs.JSONLines("connection closed")) != 0 {
		t.Error("a spoofed connection was logged as forwarded")
	}
}

func TestSpoofLogIsRateLimited(t *testing.T) {
	h := newHarness(t, nil)
	h.clock.Freeze() // one rate-limit window, however slow the machine
	const n = 3 * loglimit.RefusalBurst
	for range n {
		c := h.dialFrom("127.0.0.3")
		c.Write(v2Header(t, "192.0.2.66:1", "198.51.100.1:636", "", ""))
		expectClosed(t, c)
	}
	h.settled()
	if got := h.metric("edgefleet_origin_spoofed_headers_total", nil); got != n {
		t.Fatalf("spoofed_headers_total = %v, want %d (every one counted)", got, n)
	}
	if got := len(h.logs.JSONLines("spoofed proxy header")); got != loglimit.RefusalBurst {
		t.Fatalf("%d log lines for %d spoofs within one window, want %d", got, n, loglimit.RefusalBurst)
	}
}

func TestUntrustedReject(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Untrusted = UntrustedReject })
	c := h.dialFrom("127.0.0.3")
	c.Write(clientHello)
	expectClosed(t, c)
	c = h.dialFrom("127.0.0.2")
	if p := roundTrip(t, c, v2Header(t, "192.0.2.1:2", "198.51.100.1:636", "", ""), payload); p.Claimed != "192.0.2.1:2" {
		t.Fatalf("trusted edge not served under untrusted: reject: %+v", p)
	}
	c.Close()
	// A trusted edge may still send no header.
	c = h.dialFrom("127.0.0.2")
	if p := roundTrip(t, c, nil, payload); p.Header != HeaderNone {
		t.Fatalf("headerless trusted connection: %+v", p)
	}
	c.Close()
	h.settled()
	if got := h.metric(conns(HeaderNone, ResultUntrusted)); got != 1 {
		t.Errorf("connections_total{none,untrusted} = %v, want 1", got)
	}
	if got := h.metric("edgefleet_origin_spoofed_headers_total", nil); got != 0 {
		t.Errorf("spoofed_headers_total = %v", got)
	}
}

func TestRequireHeader(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.RequireHeader = true })
	c := h.dialFrom("127.0.0.2")
	c.Write(clientHello)
	expectClosed(t, c)
	// require_header is about trusted sources; others pass through.
	c = h.dialFrom("127.0.0.5")
	if p := roundTrip(t, c, nil, append(append([]byte{}, clientHello...), payload...)); p.Header != HeaderNone || p.Claimed != "" {
		t.Fatalf("untrusted headerless connection: %+v", p)
	}
	c.Close()
	h.settled()
	if got := h.metric(conns(HeaderNone, ResultNoHeader)); got != 1 {
		t.Errorf("connections_total{none,no-header} = %v, want 1", got)
	}
	if lines := h.logs.JSONLines("proxy header required"); len(lines) != 1 {
		t.Errorf("log lines: %v", lines)
	}
}

func TestBadHeaders(t *testing.T) {
	h := newHarness(t, nil)
	tests := []struct {
		name   string
		send   []byte
		eof    bool // half-close after sending (a truncated header)
		header string
	}{
		{"v1 garbage", []byte("PROXY garbage\r\n"), false, HeaderV1},
		{"v1 bad address", []byte("PROXY TCP4 300.1.1.1 198.51.100.1 1 636\r\n"), false, HeaderV1},
		{"v1 without crlf within 107 bytes", append([]byte("PROXY TCP4 "), make([]byte, 120)...), false, HeaderV1},
		{"v1 truncated", []byte("PROXY TCP4 192.0.2.1 "), true, HeaderV1},
		{"v2 truncated", v2Raw(0x21, 0x11, 12, []byte{192, 0, 2}), true, HeaderV2},
		{"v2 oversized tlv block", v2Raw(0x21, 0x11, proxyheader.MaxV2Length+1, nil), false, HeaderV2},
		{"v2 largest length field", v2Raw(0x21, 0x11, 0xFFFF, nil), false, HeaderV2},
		{"v2 malformed tlv", v2Raw(0x21, 0x11, 18, append(make([]byte, 12), 0xE0, 0x00, 0xC8, 'a', 'b', 'c')), false, HeaderV2},
		{"v2 bad command", v2Raw(0x2F, 0x11, 12, make([]byte, 12)), false, HeaderV2},
		{"v2 proxy without address", v2Raw(0x21, 0x00, 0, nil), false, HeaderV2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := h.metric(conns(tt.header, ResultBadHeader))
			c := h.dialFrom("127.0.0.2")
			c.Write(tt.send)
			if tt.eof {
				c.CloseWrite()
			}
			// Oversized headers are refused on their prefix: the front
			// must not wait for bytes that will never come (header_timeout
			// is a minute here).
			expectClosed(t, c)
			eventually(t, "bad-header counted", func() bool { return h.metric(conns(tt.header, ResultBadHeader)) == before+1 })
		})
	}
	h.settled()
	if n := h.inner.count(); n != 0 {
		t.Errorf("inner dialled %d times for bad headers", n)
	}
	lines := h.logs.JSONLines("bad proxy header")
	if got := len(lines); got != loglimit.RefusalBurst {
		t.Errorf("%d bad-header log lines, want %d (rate limited)", got, loglimit.RefusalBurst)
	}
	for _, l := range lines {
		if _, ok := l["err"].(string); !ok || l["error"] != nil {
			t.Fatalf("the parse error is not under the shared key err (docs/architecture.md): %v", l)
		}
	}
}

// TestZeroByteConnections: health checks (connect and close, or a LOCAL
// header and close) are counted and write no log line.
func TestZeroByteConnections(t *testing.T) {
	h := newHarness(t, nil)
	h.dialFrom("127.0.0.5").Close()
	h.dialFrom("127.0.0.2").Close()
	eventually(t, "health checks counted", func() bool {
		return h.metric(conns(HeaderNone, ResultEmpty)) == 2
	})
	h.settled()
	if s := h.logs.String(); s != "" {
		t.Fatalf("zero-byte connections logged:\n%s", s)
	}

	// A LOCAL header then close, to an inner that sends nothing: no line.
	silentInner, _ := net.Listen("tcp", "127.0.0.1:0")
	testbed.ServeConns(t, silentInner, func(c net.Conn) { c.Read(make([]byte, 1)) })
	quiet := newHarness(t, func(c *Config) { c.Inner = silentInner.Addr().String() })
	c := quiet.dialFrom("127.0.0.2")
	c.Write(v2Raw(0x20, 0x00, 0, nil))
	c.CloseWrite()
	expectClosed(t, c)
	quiet.settled()
	if got := quiet.metric(conns(HeaderLocal, ResultOK)); got != 1 {
		t.Fatalf("connections_total{local,ok} = %v, want 1", got)
	}
	if s := quiet.logs.String(); s != "" {
		t.Fatalf("health check logged:\n%s", s)
	}
}

// TestTrickledHeader: a header that arrives in pieces within
// header_timeout is read whole (the v1 parser alone would refuse it).
func TestTrickledHeader(t *testing.T) {
	h := newHarness(t, nil)
	for _, hdr := range [][]byte{
		v2Header(t, "192.0.2.10:50000", "198.51.100.1:636", "edge-ams-1", "id-1"),
		[]byte("PROXY TCP4 192.0.2.10 198.51.100.1 50000 636\r\n"),
	} {
		c := h.dialFrom("127.0.0.2")
		c.SetNoDelay(true)
		for _, piece := range [][]byte{hdr[:3], hdr[3:14], hdr[14:20], hdr[20:]} {
			c.Write(piece)
			time.Sleep(5 * time.Millisecond)
		}
		if p := roundTrip(t, c, nil, payload); p.Claimed != "192.0.2.10:50000" {
			t.Fatalf("trickled header: inner saw %+v", p)
		}
		c.Close()
	}
	h.settled()
}

// TestSilentConnectionsDoNotBlockOthers: 1,000 connections that send
// nothing stay open while normal clients keep being served.
func TestSilentConnectionsDoNotBlockOthers(t *testing.T) {
	h := newHarness(t, nil)
	const silent = 1000
	var idle []*net.TCPConn
	for i := range silent {
		idle = append(idle, h.dialFrom("127.0.0."+strconv.Itoa(4+i%2)))
	}
	eventually(t, "silent connections accepted", func() bool {
		return h.metric("edgefleet_origin_connections_active", nil) == silent
	})
	for i := range 50 {
		c := h.dialFrom("127.0.0.2")
		claimed := "192.0.2.1:" + strconv.Itoa(1000+i)
		p := roundTrip(t, c, v2Header(t, claimed, "198.51.100.1:636", "edge", ""), payload)
		if p.Claimed != claimed {
			t.Fatalf("client %d: inner saw %+v", i, p)
		}
		c.Close()
	}
	if n := h.table.Len(); n > 50 {
		t.Fatalf("%d table entries: silent connections hold entries", n)
	}
	for _, c := range idle {
		c.Close()
	}
	h.settled()
	if got := h.metric(conns(HeaderNone, ResultEmpty)); got != silent {
		t.Errorf("connections_total{none,empty} = %v, want %d", got, silent)
	}
	if got := h.metric("edgefleet_origin_header_timeouts_total", nil); got != 0 {
		t.Errorf("header_timeouts_total = %v", got)
	}
	if got := len(h.logs.JSONLines("connection closed")); got != 50 {
		t.Errorf("%d close lines, want 50 (silent connections leave none)", got)
	}
}

// TestPeerEntryLifetime: the entry exists while the connection is open
// (in process and over HTTP) and is gone when it closes.
func TestPeerEntryLifetime(t *testing.T) {
	h := newHarness(t, nil)
	api := httptest.NewServer(h.table.Handler())
	defer api.Close()
	var open []*net.TCPConn
	var ports []int
	for i := range 20 {
		c := h.dialFrom("127.0.0.2")
		p := roundTrip(t, c, v2Header(t, "192.0.2.9:"+strconv.Itoa(2000+i), "198.51.100.1:636", "e", ""), payload)
		open, ports = append(open, c), append(ports, p.InnerPort)
	}
	if h.table.Len() != 20 || h.metric("edgefleet_origin_peer_table_entries", nil) != 20 {
		t.Fatalf("table has %d entries, want 20", h.table.Len())
	}
	resp, err := http.Get(api.URL + "/peers/" + strconv.Itoa(ports[7]))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /peers/%d: %v %v", ports[7], resp.StatusCode, err)
	}
	resp.Body.Close()
	// Half-close from the client: the entry stays while the inner side
	// still sends, and goes when both directions are done.
	for _, c := range open {
		c.CloseWrite()
	}
	for _, c := range open {
		expectClosed(t, c)
	}
	h.settled()
	resp, _ = http.Get(api.URL + "/peers/" + strconv.Itoa(ports[7]))
	if resp.StatusCode != 404 {
		t.Fatalf("GET /peers/%d after close: %d, want 404", ports[7], resp.StatusCode)
	}
	resp.Body.Close()
}

func TestInnerDown(t *testing.T) {
	down := testbed.FreeAddr(t, "127.0.0.1") // nothing listens there
	h := newHarness(t, func(c *Config) { c.Inner = down })
	c := h.dialFrom("127.0.0.2")
	c.Write(v2Header(t, "192.0.2.1:1", "198.51.100.1:636", "", ""))
	expectClosed(t, c)
	h.settled()
	if got := h.metric(conns(HeaderV2, ResultInnerError)); got != 1 {
		t.Fatalf("connections_total{v2,inner-error} = %v", got)
	}
	if lines := h.logs.JSONLines("dial inner failed"); len(lines) != 1 || lines[0]["level"] != "ERROR" {
		t.Fatalf("log: %v", h.logs.String())
	}
}

func TestShutdown(t *testing.T) {
	h := newHarness(t, nil)
	c := h.dialFrom("127.0.0.2")
	roundTrip(t, c, nil, payload)

	// Drain: Shutdown waits for the open connection.
	done := make(chan error, 1)
	go func() { done <- h.front.Shutdown(context.Background()) }()
	eventually(t, "listener closed", func() bool {
		c, err := net.DialTimeout("tcp", h.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a connection open", err)
	default:
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown = %v", err)
	}

	// Cut short: an expired context closes what is left.
	h2 := newHarness(t, nil)
	c2 := h2.dialFrom("127.0.0.2")
	roundTrip(t, c2, nil, payload)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h2.front.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want context.Canceled", err)
	}
	expectClosed(t, c2)
	h2.settled()
}

func TestIPv6Front(t *testing.T) {
	testbed.NeedIPv6Loopback(t)
	h := newHarnessWith(t, "::1", nil, func(c *Config) { c.TrustedEdges = []string{"::1/128"} })
	c := h.dialFrom("::1")
	p := roundTrip(t, c, v2Header(t, "[2001:db8::5]:7000", "[2001:db8::1]:636", "e6", ""), payload)
	if p.Claimed != "[2001:db8::5]:7000" || p.Measured != c.LocalAddr().String() || hostOf(t, p.Measured) != "::1" {
		t.Fatalf("inner saw %+v", p)
	}
}

// TestBulkBothWaysWithHalfClose: megabytes each way through the front,
// the client's half-close carried to inner while the answer still flows.
func TestBulkBothWaysWithHalfClose(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	down := make([]byte, 5<<20)
	rand.Read(down)
	got := make(chan [32]byte, 1)
	go func() {
		c, err := inner.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		h := sha256.New()
		io.Copy(h, c) // until the client's FIN arrives through the front
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		got <- sum
		c.Write(down)
	}()
	h := newHarness(t, func(c *Config) { c.Inner = inner.Addr().String() })
	c := h.dialFrom("127.0.0.2")
	up := make([]byte, 8<<20)
	rand.Read(up)
	hdr := v2Header(t, "192.0.2.1:1", "198.51.100.1:636", "", "")
	go func() {
		c.Write(append(hdr, up...))
		c.CloseWrite()
	}()
	back, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if <-got != sha256.Sum256(up) {
		t.Fatal("inner received other bytes than were sent")
	}
	if sha256.Sum256(back) != sha256.Sum256(down) {
		t.Fatalf("client got %d bytes back, want %d", len(back), len(down))
	}
	c.Close()
	h.settled()
	lines := h.logs.JSONLines("connection closed")
	if len(lines) != 1 || lines[0]["bytes_up"] != float64(len(up)) || lines[0]["bytes_down"] != float64(len(down)) || lines[0]["reason"] != "eof" {
		t.Fatalf("close line %v", lines)
	}
}

// TestIdleConnectionResumesAndShutsDown: a forwarded connection left idle
// (it holds no goroutine; its loop parks) carries data again when it
// comes, and a forced shutdown still closes it.
func TestIdleConnectionResumesAndShutsDown(t *testing.T) {
	h := newHarness(t, nil)
	c := h.dialFrom("127.0.0.2")
	roundTrip(t, c, v2Header(t, "192.0.2.1:1", "198.51.100.1:636", "", ""), payload)
	parked(t)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("again"))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "again" {
		t.Fatalf("after idle: %q, %v", buf, err)
	}
	parked(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.front.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v", err)
	}
	expectClosed(t, c)
	h.settled()
}

// TestDualStackListener: a front listening on [::] (what ":8636" gives
// on Linux) sees an IPv4 edge as ::ffff:127.0.0.2. IPv4 trusted_edges, in
// either spelling, must still match it, and measured is the IPv4 form.
func TestDualStackListener(t *testing.T) {
	if ln, err := net.Listen("tcp", "[::]:0"); err != nil {
		if testbed.InCI() {
			t.Fatalf("no dual-stack listener: %v", err)
		}
		t.Skipf("no dual-stack listener (%v) — skipped outside CI", err)
	} else {
		ln.Close()
	}
	for _, trusted := range [][]string{{"127.0.0.0/8"}, {"127.0.0.2"}, {"::ffff:127.0.0.0/104"}, {"::ffff:127.0.0.2"}} {
		t.Run(strings.Join(trusted, ","), func(t *testing.T) {
			h := newHarnessWith(t, "::", nil, func(c *Config) { c.TrustedEdges = trusted })
			_, port, _ := net.SplitHostPort(h.addr)
			v4 := net.JoinHostPort("127.0.0.1", port)

			c := dialFrom(t, "127.0.0.2", v4)
			p := roundTrip(t, c, v2Header(t, "192.0.2.1:5", "198.51.100.1:636", "e", ""), payload)
			if p.Header != HeaderV2 || p.Claimed != "192.0.2.1:5" || p.Measured != c.LocalAddr().String() {
				t.Fatalf("trusted IPv4 edge through a dual-stack listener: inner saw %+v, want claimed 192.0.2.1:5, measured %s", p, c.LocalAddr())
			}
			c.Close()

			if trusted[0] == "127.0.0.0/8" || trusted[0] == "::ffff:127.0.0.0/104" {
				return // 127.0.0.3 is trusted too
			}
			c = dialFrom(t, "127.0.0.3", v4)
			c.Write(v2Header(t, "192.0.2.66:1", "198.51.100.1:636", "", ""))
			expectClosed(t, c)
			eventually(t, "spoof counted", func() bool { return h.metric("edgefleet_origin_spoofed_headers_total", nil) == 1 })
			if lines := h.logs.JSONLines("spoofed proxy header"); len(lines) != 1 || lines[0]["measured"] != c.LocalAddr().String() {
				t.Fatalf("spoof log: %v (measured must be the IPv4 form %s)", lines, c.LocalAddr())
			}
		})
	}
}

// TestHeaderTimeoutRealSockets: header_timeout on the event loops, over real TCP
// sockets: a trusted edge that trickles its header a byte at a time after
// the signature (each byte well within the timeout, so only a deadline on
// the whole header stops it) and a client that sends nothing are both cut
// off, while a normal client is served meanwhile.
func TestHeaderTimeoutRealSockets(t *testing.T) {
	const timeout = 300 * time.Millisecond
	h := newHarness(t, func(c *Config) { c.HeaderTimeout = timeout })
	hdr := []byte("PROXY TCP4 192.0.2.10 198.51.100.1 50000 636\r\n")

	silent := h.dialFrom("127.0.0.5")
	// Each of these stalls a different way (a signature prefix, a v2
	// prefix, a v2 address block missing) and is cut off.
	stalled := []*net.TCPConn{}
	for _, b := range [][]byte{
		[]byte("\r\n\r\n"), // a signature prefix
		append(append([]byte{}, proxyheader.SigV2...), 0x21, 0x11, 0x00),
		v2Raw(0x21, 0x11, 12, []byte{192, 0}), // address block missing
	} {
		c := h.dialFrom("127.0.0.2")
		c.Write(b)
		stalled = append(stalled, c)
	}
	trickler := h.dialFrom("127.0.0.2")
	trickler.SetNoDelay(true)
	sentAll := make(chan bool, 1)
	go func() {
		// The signature at once, so that the front knows a v1 header is
		// coming however late the scheduler runs this goroutine; then the
		// other 41 bytes, one every 50ms: 2s for the whole header.
		sig := len("PROXY ")
		if _, err := trickler.Write(hdr[:sig]); err != nil {
			sentAll <- false
			return
		}
		for _, b := range hdr[sig:] {
			time.Sleep(50 * time.Millisecond)
			if _, err := trickler.Write([]byte{b}); err != nil {
				sentAll <- false
				return
			}
		}
		sentAll <- true
	}()

	c := h.dialFrom("127.0.0.2")
	if p := roundTrip(t, c, v2Header(t, "192.0.2.1:1", "198.51.100.1:636", "", ""), payload); p.Claimed != "192.0.2.1:1" {
		t.Fatalf("normal client while others stall: %+v", p)
	}
	c.Close()

	expectClosed(t, silent)
	expectClosed(t, trickler)
	for _, c := range stalled {
		expectClosed(t, c)
	}
	if <-sentAll {
		t.Fatal("the trickler sent its whole header: header_timeout did not bound the header")
	}
	h.settled()
	if got := h.metric("edgefleet_origin_header_timeouts_total", nil); got != 5 {
		t.Errorf("header_timeouts_total = %v, want 5", got)
	}
	none, v1, v2 := h.metric(conns(HeaderNone, ResultTimeout)), h.metric(conns(HeaderV1, ResultTimeout)), h.metric(conns(HeaderV2, ResultTimeout))
	if none != 2 || v1 != 1 || v2 != 2 {
		t.Errorf("connections_total timeout: none=%v v1=%v v2=%v, want 2, 1, 2", none, v1, v2)
	}
	lines := h.logs.JSONLines("proxy header timeout")
	if len(lines) != 4 {
		t.Errorf("timeout log lines (all but the silent one's): %v", lines)
	}
	for _, l := range lines {
		if hostOf(t, l["measured"].(string)) != "127.0.0.2" {
			t.Errorf("timeout log line of the silent connection: %v", l)
		}
	}
	if n := h.inner.count(); n != 1 {
		t.Errorf("inner dialled %d times, want 1 (the normal client)", n)
	}
}

// parked waits until no goroutine runs anything of a connection: the
// event loop that carries it is parked (in evloop's loop, waiting on its
// epoll descriptor), and neither the front's handler nor a Conn method
// is on any goroutine's stack. An idle forwarded connection holds its two
// sockets and no goroutine, the state the test is about.
func parked(t *testing.T) {
	t.Helper()
	eventually(t, "the idle connection holds no goroutine", func() bool {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		return strings.Contains(stacks, "evloop.(*loop).run(") &&
			!strings.Contains(stacks, "evloop.(*Conn).") && !strings.Contains(stacks, "origin.(*handler).")
	})
}

// TestFrontMaxConns: with front.max_conns open
// connections, one more is closed at once and counted; a freed slot
// serves again.
func TestFrontMaxConns(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxConns = 2 })
	var open []*net.TCPConn
	for range 2 {
		c := h.dialFrom(clientIP)
		roundTrip(t, c, nil, payload)
		open = append(open, c)
	}
	c := h.dialFrom(clientIP)
	expectClosed(t, c)
	eventually(t, "the refusal counted", func() bool { return h.metric(conns(HeaderNone, ResultMaxConns)) == 1 })
	open[0].Close()
	eventually(t, "a slot freed", func() bool { return h.metric("edgefleet_origin_connections_active", nil) == 1 })
	roundTrip(t, h.dialFrom(clientIP), nil, payload)
}

// TestFrontLoopCut: a front whose inner is itself (here
// a listener the configuration does not name, where the start check cannot
// see it) closes the connection that comes back from its own inner socket
// and counts it, instead of chaining until the file descriptors run out.
func TestFrontLoopCut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Listen = []string{"127.0.0.1:1"}
	cfg.Inner = ln.Addr().String()
	reg := prometheus.NewRegistry()
	logs := &testbed.Buffer{}
	table := NewPeerTable()
	f, err := New(cfg, table, slog.New(slog.NewJSONHandler(logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- f.Serve(ln) }()
	defer func() {
		f.Shutdown(t.Context())
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	for i := range 20 {
		c := dialFrom(t, clientIP, ln.Addr().String())
		c.Write(payload)
		expectClosed(t, c)
		c.Close()
		eventually(t, "the loop counted", func() bool {
			return metricValue(t, reg, "edgefleet_origin_connections_total", map[string]string{"header": HeaderNone, "result": ResultLoop}) > float64(i)
		})
	}
	eventually(t, "every connection over", func() bool {
		return metricValue(t, reg, "edgefleet_origin_connections_active", nil) == 0 && table.Len() == 0
	})
	if loops := metricValue(t, reg, "edgefleet_origin_connections_total", map[string]string{"header": HeaderNone, "result": ResultLoop}); loops > 40 {
		t.Fatalf("%v loops for 20 clients: the loop chained", loops)
	}
}

// TestResetAfterHeader: a source that sends a header and resets the
// connection at once (what HAProxy's health checks do: a LOCAL header,
// then a close with SO_LINGER 0) is closed and its slot freed, whether
// the reset arrives with the header or after the dial.
func TestResetAfterHeader(t *testing.T) {
	h := newHarness(t, nil)
	for range 20 {
		c := h.dialFrom("127.0.0.2")
		c.Write(v2Raw(0x20, 0x00, 0, nil))
		c.SetLinger(0)
		c.Close()
	}
	h.settled()
}
