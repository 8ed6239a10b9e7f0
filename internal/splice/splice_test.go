package splice

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/pipepool"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// entries are the two ways to join a pair; every behaviour test runs
// through both.
var entries = []struct {
	name string
	join func(client, server net.Conn, done chan<- Result)
}{
	{"Join", func(c, s net.Conn, done chan<- Result) { go func() { done <- Join(c, s) }() }},
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
	if extra > 2*pipepool.Size+4 {
		t.Fatalf("%d extra fds for %d idle relayed connections", extra, n)
	}
	// What is not in the pool is held by a connection.
	if held := extra - 2*pipepool.Idle(); held > 2*4 {
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

// TestPeeked: a Conn's Peeked bytes reach the server before the client
// sends anything more (a client that waits for an answer) — over plain TCP
// (the splice path) and through a wrapped connection (the blocking path).
func TestPeeked(t *testing.T) {
	for _, e := range entries {
		for _, wrap := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s wrapped=%v", e.name, wrap), func(t *testing.T) {
				client, server, in, out := relayed(t, wrap)
				done := make(chan Result, 1)
				e.join(&Conn{Conn: in, Peeked: []byte("hello")}, out, done)
				server.SetReadDeadline(time.Now().Add(10 * time.Second))
				got := make([]byte, len("hello"))
				if _, err := io.ReadFull(server, got); err != nil || string(got) != "hello" {
					t.Fatalf("server read %q, %v; want hello before the client sends more", got, err)
				}
				server.Write([]byte("answer"))
				client.SetReadDeadline(time.Now().Add(10 * time.Second))
				ans := make([]byte, len("answer"))
				if _, err := io.ReadFull(client, ans); err != nil {
					t.Fatalf("client: %v", err)
				}
				client.Close()
				server.Close()
				select {
				case res := <-done:
					if res.Up != 5 {
						t.Fatalf("Up = %d, want 5", res.Up)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the pair never finished")
				}
			})
		}
	}
}
