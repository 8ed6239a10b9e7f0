package splice

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// entries are the two ways to join a pair; every behaviour test runs
// through both.
var entries = []struct {
	name string
	join func(client, server net.Conn, done chan<- Result)
}{
	{"Join", func(c, s net.Conn, done chan<- Result) { go func() { done <- Join(c, s) }() }},
	{"Start", func(c, s net.Conn, done chan<- Result) { Start(c, s, func(r Result) { done <- r }) }},
	{"Prepare+Run", func(c, s net.Conn, done chan<- Result) {
		p := Prepare(c, s, func(r Result) { done <- r })
		go p.Run() // lends this goroutine to client→server until it idles
	}},
}

func TestBothDirectionsWithHalfClose(t *testing.T) {
	for _, e := range entries {
		for _, pending := range []bool{true, false} {
			name := e.name
			if pending {
				name += " with pending bytes"
			}
			t.Run(name, func(t *testing.T) { testHalfClose(t, e.join, pending) })
		}
	}
}

// testHalfClose sends a distinct stream each way, closes the client's
// write half first, and checks that the server's answer still arrives
// whole after the client's FIN went through.
func testHalfClose(t *testing.T, join func(c, s net.Conn, done chan<- Result), pending bool) {
	client, relayIn := testbed.TCPPair(t)
	relayOut, server := testbed.TCPPair(t)
	done := make(chan Result, 1)
	hdr := []byte{}
	var in net.Conn = relayIn
	if pending {
		hdr = []byte("hdr:")
		in = &Conn{Conn: relayIn, Peeked: hdr}
	}
	join(in, relayOut, done)

	up := make([]byte, 8<<20)
	down := make([]byte, 5<<20)
	rand.Read(up)
	rand.Read(down)

	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(server); got <- b }() // ends at the relayed FIN
	if _, err := client.Write(up); err != nil {
		t.Fatal(err)
	}
	client.CloseWrite()
	if b := <-got; !bytes.Equal(b, append(hdr, up...)) {
		t.Fatalf("server got %d bytes, want %d", len(b), len(up)+len(hdr))
	}
	// The upstream half is closed; downstream must still work.
	go func() { server.Write(down); server.CloseWrite() }()
	b, err := io.ReadAll(client)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(b) != sha256.Sum256(down) {
		t.Fatalf("client got %d bytes, want %d", len(b), len(down))
	}
	select {
	case res := <-done:
		if res.Reason != ReasonEOF || res.Up != int64(len(up)+len(hdr)) || res.Down != int64(len(down)) {
			t.Fatalf("result = %+v", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Join did not return after both halves closed")
	}
}

func TestResetClosesBoth(t *testing.T) {
	for _, e := range entries {
		t.Run(e.name, func(t *testing.T) { testReset(t, e.join) })
	}
}

// testReset checks that an abortive close on one side ends the whole pair
// even though the other side stays silent.
func testReset(t *testing.T, join func(c, s net.Conn, done chan<- Result)) {
	client, relayIn := testbed.TCPPair(t)
	relayOut, server := testbed.TCPPair(t)
	done := make(chan Result, 1)
	join(relayIn, relayOut, done)
	client.Write([]byte("x"))
	buf := make([]byte, 1)
	io.ReadFull(server, buf)
	client.SetLinger(0)
	client.Close() // RST
	select {
	case res := <-done:
		if res.Reason != ReasonClientError {
			t.Fatalf("reason = %q, want %q", res.Reason, ReasonClientError)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Join hung after the client reset")
	}
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := server.Read(buf); err == nil {
		t.Fatal("server side still open after client reset")
	}
}

func TestIdleHoldsNoPipe(t *testing.T) {
	for _, e := range entries {
		t.Run(e.name, func(t *testing.T) { testIdle(t, e.join) })
	}
}

// testIdle checks the property the fd budget rests on: a relayed
// connection with nothing to read holds no pipe.
func testIdle(t *testing.T, join func(c, s net.Conn, done chan<- Result)) {
	before := countFDs(t)
	const n = 50
	for range n {
		client, relayIn := testbed.TCPPair(t)
		relayOut, server := testbed.TCPPair(t)
		join(relayIn, relayOut, make(chan Result, 1))
		client.Write([]byte("ping"))
		buf := make([]byte, 4)
		io.ReadFull(server, buf)
		server.Write(buf)
		io.ReadFull(client, buf)
	}
	time.Sleep(100 * time.Millisecond)
	// 4 sockets per pair are ours (test ends + relay ends); pooled pipes are
	// shared and bounded by the pool size, not by n.
	extra := countFDs(t) - before - 4*n
	if extra > 2*cap(pool)+4 {
		t.Fatalf("%d extra fds for %d idle relayed connections", extra, n)
	}
	// What is not in the pool is held by a connection.
	if held := extra - 2*len(pool); held > 2*4 {
		t.Fatalf("idle connections hold pipes: %d extra fds outside the pool for %d connections", held, n)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestStartAfterIdle shortens the idle grace so that every pause hands a
// direction to a fresh waiter, then checks that messages after pauses and
// a long burst after a pause (the grace deadline must not cut it) all
// arrive whole.
func TestStartAfterIdle(t *testing.T) {
	defer func(g time.Duration) { idleGrace = g }(idleGrace)
	idleGrace = time.Millisecond
	client, relayIn := testbed.TCPPair(t)
	relayOut, server := testbed.TCPPair(t)
	done := make(chan Result, 1)
	Start(relayIn, relayOut, func(r Result) { done <- r })

	buf := make([]byte, 5)
	for i := range 5 {
		msg := []byte(fmt.Sprintf("ping%d", i))
		client.Write(msg)
		if _, err := io.ReadFull(server, buf); err != nil || !bytes.Equal(buf, msg) {
			t.Fatalf("message %d up: %q, %v", i, buf, err)
		}
		time.Sleep(10 * time.Millisecond)
		server.Write(msg)
		if _, err := io.ReadFull(client, buf); err != nil || !bytes.Equal(buf, msg) {
			t.Fatalf("message %d down: %q, %v", i, buf, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	big := make([]byte, 64<<20)
	rand.Read(big)
	go func() { client.Write(big); client.CloseWrite() }()
	got, err := io.ReadAll(server)
	if err != nil || sha256.Sum256(got) != sha256.Sum256(big) {
		t.Fatalf("long burst after a pause: %d bytes, %v", len(got), err)
	}
	server.CloseWrite()
	select {
	case res := <-done:
		if res.Reason != ReasonEOF || res.Up != 25+int64(len(big)) || res.Down != 25 {
			t.Fatalf("result %+v", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start never reported")
	}
}

// TestParkedPair lets both directions of a Start pair park (the grace is
// shortened) and checks that the pair holds no goroutine while idle and
// still ends, with the right reason, however it is closed.
func TestParkedPair(t *testing.T) {
	defer func(g time.Duration) { idleGrace = g }(idleGrace)
	idleGrace = time.Millisecond
	for _, tc := range []struct {
		name   string
		end    func(p *Pair, client, server *net.TCPConn)
		reason string
	}{
		{"Pair.Close", func(p *Pair, _, _ *net.TCPConn) { p.Close() }, ReasonClientError},
		{"client reset", func(_ *Pair, c, _ *net.TCPConn) { c.SetLinger(0); c.Close() }, ReasonClientError},
		{"server reset", func(_ *Pair, _, s *net.TCPConn) { s.SetLinger(0); s.Close() }, ReasonServerError},
		{"both FIN", func(_ *Pair, c, s *net.TCPConn) { c.CloseWrite(); s.CloseWrite() }, ReasonEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 20
			type end struct {
				pair           *Pair
				client, server *net.TCPConn
				done           chan Result
			}
			var ends []end
			busy := func() int { return runtime.NumGoroutine() - directions.Idle() }
			before := busy()
			for range n {
				client, relayIn := testbed.TCPPair(t)
				relayOut, server := testbed.TCPPair(t)
				done := make(chan Result, 1)
				p := Start(relayIn, relayOut, func(r Result) { done <- r })
				b := []byte("x")
				client.Write(b)
				io.ReadFull(server, b)
				server.Write(b)
				io.ReadFull(client, b)
				ends = append(ends, end{p, client, server, done})
			}
			// Every direction parks once its grace has passed.
			deadline := time.Now().Add(10 * time.Second)
			for busy() > before+2 {
				if time.Now().After(deadline) {
					t.Fatalf("%d busy goroutines for %d idle pairs (%d before)", busy(), n, before)
				}
				time.Sleep(5 * time.Millisecond)
			}
			for _, e := range ends {
				tc.end(e.pair, e.client, e.server)
				select {
				case res := <-e.done:
					if res.Reason != tc.reason || res.Up != 1 || res.Down != 1 {
						t.Fatalf("result %+v, want reason %s", res, tc.reason)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("a parked pair never finished")
				}
			}
		})
	}
}

// relayed returns a client and a server, and the relay's two ends facing
// them (in, out) for a test to join; wrapped, in and out are not
// *net.TCPConn, so the pair uses blocking copies.
func relayed(t *testing.T, wrapped bool) (client, server *net.TCPConn, in, out net.Conn) {
	client, relayIn := testbed.TCPPair(t)
	relayOut, server := testbed.TCPPair(t)
	if wrapped {
		type conn struct{ *net.TCPConn }
		return client, server, conn{relayIn}, conn{relayOut}
	}
	return client, server, relayIn, relayOut
}

// TestScreen: Pair.Screen sees the client's first bytes before any is
// forwarded — a refusal closes the pair with the check's error and
// forwards nothing, a prefix the check cannot decide on is held until more
// comes (or EOF), and a pass forwards everything — over plain TCP (the
// splice path) and through a wrapped connection (the blocking path).
func TestScreen(t *testing.T) {
	errBad := fmt.Errorf("bad start")
	check := func(b []byte) error {
		n := min(len(b), 3)
		if !bytes.Equal(b[:n], []byte("BAD")[:n]) {
			return nil
		}
		if n < 3 {
			return ErrMore
		}
		return errBad
	}
	for _, wrap := range []bool{false, true} {
		for _, tc := range []struct {
			name    string
			writes  []string
			want    string // what the server side receives
			refused bool
		}{
			{"refused", []string{"BADxyz"}, "", true},
			{"refused in pieces", []string{"B", "A", "Dxyz"}, "", true},
			{"prefix then pass", []string{"BA", "X more"}, "BAX more", false},
			{"prefix then EOF", []string{"BA"}, "BA", false},
			{"pass at once", []string{"GOOD"}, "GOOD", false},
		} {
			t.Run(fmt.Sprintf("%s wrapped=%v", tc.name, wrap), func(t *testing.T) {
				client, server, in, out := relayed(t, wrap)
				done := make(chan Result, 1)
				p := Prepare(in, out, func(r Result) { done <- r })
				p.Screen(check)
				p.Run()
				for _, w := range tc.writes {
					client.Write([]byte(w))
					time.Sleep(5 * time.Millisecond) // one segment each
				}
				client.CloseWrite()
				server.SetReadDeadline(time.Now().Add(10 * time.Second))
				got, _ := io.ReadAll(server)
				server.Close()
				if string(got) != tc.want {
					t.Fatalf("server got %q, want %q", got, tc.want)
				}
				var res Result
				select {
				case res = <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("the pair never finished")
				}
				if refused := res.Err == errBad; refused != tc.refused || refused && res.Reason != ReasonClientError {
					t.Fatalf("result %+v, refused=%v want %v", res, refused, tc.refused)
				}
				if !tc.refused && res.Up != int64(len(tc.want)) {
					t.Fatalf("Up = %d, want %d", res.Up, len(tc.want))
				}
			})
		}
	}
}

// TestPeeked: a Conn's Peeked bytes reach the server before the client
// sends anything more (a client that waits for an answer), screened first
// when the pair has a Screen — over plain TCP and the blocking path, for
// every entry.
func TestPeeked(t *testing.T) {
	errBad := fmt.Errorf("bad start")
	check := func(b []byte) error {
		switch {
		case bytes.HasPrefix(b, []byte("BAD")):
			return errBad
		case bytes.HasPrefix([]byte("BAD"), b):
			return ErrMore
		}
		return nil
	}
	for _, e := range entries {
		for _, wrap := range []bool{false, true} {
			for _, tc := range []struct {
				name, peeked, more string // more: what the client sends once it has the answer
				screen             bool
				want               string // what the server has read when it answers
				refused            bool
			}{
				{"unscreened", "hello", "", false, "hello", false},
				{"screened, passes", "hello", "", true, "hello", false},
				{"screened, a prefix", "BA", "X", true, "BAX", false},
				{"screened, refused", "BADx", "", true, "", true},
			} {
				if tc.screen && e.name != "Prepare+Run" {
					continue // Screen is a Prepared pair's
				}
				t.Run(fmt.Sprintf("%s/%s wrapped=%v", e.name, tc.name, wrap), func(t *testing.T) {
					client, server, in, out := relayed(t, wrap)
					done := make(chan Result, 1)
					in = &Conn{Conn: in, Peeked: []byte(tc.peeked)}
					if tc.screen {
						p := Prepare(in, out, func(r Result) { done <- r })
						p.Screen(check)
						go p.Run()
					} else {
						e.join(in, out, done)
					}
					if tc.more != "" {
						client.Write([]byte(tc.more))
					}
					server.SetReadDeadline(time.Now().Add(10 * time.Second))
					got := make([]byte, len(tc.want))
					if tc.refused {
						if n, err := server.Read(make([]byte, 1)); err == nil {
							t.Fatalf("a refused client's bytes reached the server: %d", n)
						}
					} else {
						if _, err := io.ReadFull(server, got); err != nil || string(got) != tc.want {
							t.Fatalf("server read %q, %v; want %q before the client sends more", got, err, tc.want)
						}
						server.Write([]byte("answer"))
						client.SetReadDeadline(time.Now().Add(10 * time.Second))
						ans := make([]byte, len("answer"))
						if _, err := io.ReadFull(client, ans); err != nil {
							t.Fatalf("client: %v", err)
						}
						client.Close()
						server.Close()
					}
					var res Result
					select {
					case res = <-done:
					case <-time.After(10 * time.Second):
						t.Fatal("the pair never finished")
					}
					if tc.refused && (res.Err != errBad || res.Reason != ReasonClientError) {
						t.Fatalf("result %+v, want the refusal", res)
					}
					if !tc.refused && res.Up != int64(len(tc.want)) {
						t.Fatalf("Up = %d, want %d", res.Up, len(tc.want))
					}
				})
			}
		}
	}
}
