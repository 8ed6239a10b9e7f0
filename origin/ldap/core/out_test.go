package core_test

import (
	"context"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
	"github.com/prometheus/client_golang/prometheus"
)

// A client that reads slowly through a small receive buffer gets every
// answer whole and in order: the core writes what the socket takes at
// once from the goroutine that has the answer and leaves the rest to the
// session's writer, and the two never interleave or drop bytes. Three
// pipelined searches of 3001 entries with every attribute each (less
// than MaxQueued in all, so the client is never cut), read with pauses
// through small socket buffers on both sides, so that the core's socket
// is full again and again.
func TestSlowReaderGetsEveryAnswerWhole(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(3000)})
	f, err := dlp.Parse("ldap_proxy.json", []byte(dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"}))))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := core.New(core.DefaultConfig(), f, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	// Accepted sockets inherit the listener's send buffer.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 8<<10) })
		return err
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv, ln)
	c, err := (&net.Dialer{Control: smallBuffers}).Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	const searches = 3
	for id := int32(1); id <= searches; id++ {
		if _, err := c.Write(searchAttrsPDU(id, "ou=bulk,"+testbed.Suffix, "*")); err != nil {
			t.Fatal(err)
		}
	}
	entries := map[int32]int{}
	done := map[int32]bool{}
	r := wire.NewReader(c)
	for n := 0; len(done) < searches; n++ {
		if n%100 == 0 {
			time.Sleep(2 * time.Millisecond) // a slow reader, not a timer: the core's socket buffer fills meanwhile
		}
		raw, err := r.Next()
		if err != nil {
			t.Fatalf("after %d PDUs (entries %v, done %v): %v", n, entries, done, err)
		}
		m, err := wire.Parse(raw)
		if err != nil {
			t.Fatalf("PDU %d: %v", n, err)
		}
		switch {
		case m.ID < 1 || m.ID > searches || done[m.ID]:
			t.Fatalf("PDU %d: %+v for no search in progress (done %v)", n, m, done)
		case m.Op == wire.TagSearchResultEntry:
			entries[m.ID]++
		case m.Op == wire.TagSearchResultDone:
			if m.ResultCode != wire.ResultSuccess {
				t.Fatalf("search %d: %s %s", m.ID, wire.ResultName(m.ResultCode), m.Diagnostic)
			}
			done[m.ID] = true
		default:
			t.Fatalf("PDU %d: unexpected %+v", n, m)
		}
	}
	for id := int32(1); id <= searches; id++ {
		if entries[id] != 3001 {
			t.Errorf("search %d: %d entries, want 3001 (ou=bulk and its 3000 entries)", id, entries[id])
		}
	}
}
