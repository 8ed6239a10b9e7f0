package relay

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// twoHAProxyOrigins starts one HAProxy with two PROXY v2 receivers, a and
// b, each answering every HTTP request with its own name: the body of a
// response says which origin the edge chose.
func twoHAProxyOrigins(t *testing.T) (a, b string) {
	t.Helper()
	testbed.Need(t, "haproxy")
	a, b = testbed.FreeAddr(t, "127.0.0.1"), testbed.FreeAddr(t, "127.0.0.1")
	testbed.HAProxyMaxconn(t, 1000, `
frontend a
    mode http
    timeout client 1h
    timeout http-keep-alive 1h
    bind `+a+` accept-proxy
    http-request return status 200 content-type text/plain string "a"
frontend b
    mode http
    timeout client 1h
    timeout http-keep-alive 1h
    bind `+b+` accept-proxy
    http-request return status 200 content-type text/plain string "b"
`, a)
	testbed.WaitTCP(t, b, 10*time.Second)
	return a, b
}

// ask sends one HTTP request on c and returns the body of the answer:
// the name of the origin that answered.
func ask(t *testing.T, c net.Conn, r *bufio.Reader, keep bool) string {
	t.Helper()
	conn := "close"
	if keep {
		conn = "keep-alive"
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: edge\r\nConnection: "+conn+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// short makes one connection through the edge, asks once, closes, and
// waits until the edge has let go of it (active back to open), so that
// the next connection's choice sees every count settled.
func (te *testEdge) short(t *testing.T, open float64) string {
	t.Helper()
	c, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := ask(t, c, bufio.NewReader(c), false)
	c.Close()
	te.waitValue(t, open, "edgefleet_edge_connections_active")
	return got
}

// TestBalanceAcrossHAProxy: three edges, one per balance, each in front
// of the same two real PROXY receivers; the answering origin of every
// connection is counted at the receivers.
func TestBalanceAcrossHAProxy(t *testing.T) {
	a, b := twoHAProxyOrigins(t)
	for _, tc := range []struct {
		balance string
		want    string // the origins of six connections in a row, one at a time
	}{
		{"", "aaaaaa"}, // the default: failover
		{BalanceFailover, "aaaaaa"},
		{BalanceRoundRobin, "ababab"},
		{BalanceLeastConn, "ababab"}, // every count 0 each time: each in turn
	} {
		t.Run("balance="+tc.balance, func(t *testing.T) {
			e := startEdge(t, Config{Origins: OriginList(a, b), Balance: tc.balance})
			var got strings.Builder
			for range 6 {
				got.WriteString(e.short(t, 0))
			}
			if got.String() != tc.want {
				t.Fatalf("origins in turn: %s, want %s", got.String(), tc.want)
			}
		})
	}

	// least-conn against round-robin with one connection held open: the
	// busy origin is passed over until the other has as many.
	for _, tc := range []struct {
		balance string
		other   int // of four short connections, how many go to the origin not holding the open one
	}{
		{BalanceRoundRobin, 2},
		{BalanceLeastConn, 4},
	} {
		t.Run("held/balance="+tc.balance, func(t *testing.T) {
			e := startEdge(t, Config{Origins: OriginList(a, b), Balance: tc.balance})
			held, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			busy := ask(t, held, bufio.NewReader(held), true)
			n := 0
			for range 4 {
				if e.short(t, 1) != busy {
					n++
				}
			}
			if n != tc.other {
				t.Fatalf("%d of 4 connections went to the origin without the open one, want %d", n, tc.other)
			}
		})
	}
}

// TestBalanceSkipsOffline: round robin over three origins, the second
// refusing: it is tried once, marked OFFLINE, and the connections share
// the other two evenly, none failing.
func TestBalanceSkipsOffline(t *testing.T) {
	a, b := twoHAProxyOrigins(t)
	dead := testbed.FreeAddr(t, "127.0.0.1")
	for _, balance := range []string{BalanceRoundRobin, BalanceLeastConn} {
		t.Run(balance, func(t *testing.T) {
			e := startEdge(t, Config{Origins: OriginList(a, dead, b), Balance: balance})
			var got strings.Builder
			for range 6 {
				got.WriteString(e.short(t, 0))
			}
			if got.String() != "ababab" {
				t.Fatalf("origins in turn: %s, want ababab", got.String())
			}
			if v := e.value(t, "edgefleet_edge_origin_up", "origin", "o2"); v != 0 {
				t.Fatalf("origin_up{o2} = %v for a refusing origin", v)
			}
			if n := len(e.logs.JSONLines("origin offline")); n != 1 {
				t.Fatalf("%d origin offline lines, want 1 (tried once)", n)
			}
			e.waitValue(t, 6, "edgefleet_edge_connections_total", "result", ResultEOF)
		})
	}
}

// TestBalanceOfflineRetry: under round-robin an origin whose offline_retry
// has passed is retried by the very next connection (not only when its
// turn comes), and is back in the rotation once it answers.
func TestBalanceOfflineRetry(t *testing.T) {
	const retry = time.Minute
	clock := testbed.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	aAddr := testbed.FreeAddr(t, "127.0.0.1")
	b := startOrigin(t, true, echo)
	e := startEdge(t, Config{Origins: []Origin{{Name: "a", Address: aAddr}, {Name: "b", Address: b.addr}},
		Balance: BalanceRoundRobin, OfflineRetry: retry}, func(e *Edge) { e.Now = clock.Now })
	via := func() string {
		t.Helper()
		n := len(e.logs.JSONLines("connection closed"))
		if got := roundTrip(t, e.addr, "x"); got != "x" {
			t.Fatalf("echo = %q", got)
		}
		return e.waitLines(t, "connection closed", n+1)[n]["origin"].(string)
	}
	if got := via(); got != "b" { // a refused: OFFLINE
		t.Fatalf("first connection via %s", got)
	}
	ln, err := net.Listen("tcp", aAddr)
	if err != nil {
		t.Fatalf("cannot listen again on %s: %v", aAddr, err)
	}
	serveOrigin(t, ln, true, echo)
	var got []string
	for range 3 {
		got = append(got, via())
	}
	if !slices.Equal(got, []string{"b", "b", "b"}) {
		t.Fatalf("within offline_retry: via %v, want b only", got)
	}
	clock.Advance(retry)
	got = got[:0]
	for range 4 {
		got = append(got, via())
	}
	if got[0] != "a" || !slices.Equal(got[1:], []string{"b", "a", "b"}) && !slices.Equal(got[1:], []string{"a", "b", "a"}) {
		t.Fatalf("after offline_retry: via %v, want a first, then in turn", got)
	}
}

// TestBalanceSetOrigins: SIGHUP's SetOrigins under round-robin puts a new
// origin in the rotation at once; the origins that stay keep turning.
func TestBalanceSetOrigins(t *testing.T) {
	mk := func(name string) Origin {
		return Origin{Name: name, Address: startOrigin(t, true, func(c originConn) { c.Write([]byte(name)) }).addr}
	}
	x, y, z := mk("x"), mk("y"), mk("z")
	e := startEdge(t, Config{Origins: []Origin{x, y}, Balance: BalanceRoundRobin})
	var got []string
	for range 2 {
		got = append(got, roundTrip(t, e.addr, "."))
	}
	if slices.Sort(got); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("before: %v", got)
	}
	e.SetOrigins([]Origin{x, y, z})
	got = got[:0]
	for range 3 {
		got = append(got, roundTrip(t, e.addr, "."))
	}
	if slices.Sort(got); !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Fatalf("after adding z: %v, want each once", got)
	}
}

// TestValidateBalance: the three words, or empty (failover); anything else
// is refused naming the key.
func TestValidateBalance(t *testing.T) {
	for _, tc := range []struct{ balance, err string }{
		{"", ""},
		{BalanceFailover, ""},
		{BalanceRoundRobin, ""},
		{BalanceLeastConn, ""},
		{"roundrobin", `balance: "roundrobin" is not failover, round-robin or least-conn`},
		{"leastconn", `balance: "leastconn" is not failover, round-robin or least-conn`},
	} {
		cfg := DefaultConfig()
		cfg.Name, cfg.Origins, cfg.Balance = "e", OriginList("o:1", "p:2"), tc.balance
		err := cfg.Validate()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || err.Error() != tc.err) {
			t.Errorf("balance %q: %v, want %q", tc.balance, err, tc.err)
		}
	}
}
