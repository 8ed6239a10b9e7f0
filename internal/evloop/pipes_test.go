package evloop

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStalledConnectionsHoldBoundedPipes: 30 clients that read nothing
// while their upstream sends 16 MiB each hold at most MaxPipes splice
// pipes between them once stalled, not one each (a direction whose
// destination is full keeps its pipe and the bytes in it): past the
// budget a direction copies through the loop's buffer. Each client then
// reads its 16 MiB whole.
func TestStalledConnectionsHoldBoundedPipes(t *testing.T) {
	const conns, size, budget = 30, 16 << 20, 4
	var stalled sync.WaitGroup // Done once a connection's upstream cannot write on
	stalled.Add(conns)
	base := pipeFDs(t)
	up := upstream(t, func(c net.Conn) {
		buf := make([]byte, 16<<10)
		once := false
		for n := 0; n < size; {
			if !once {
				c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
			}
			m, err := c.Write(buf[:min(len(buf), size-n)])
			n += m
			switch {
			case err != nil && !once && errors.Is(err, os.ErrDeadlineExceeded):
				// The relay takes nothing more: every buffer on the way
				// is full. (A relay merely slow to read looks the same;
				// then the test proves less, it does not fail.)
				once = true
				c.SetWriteDeadline(time.Time{})
				stalled.Done()
			case err != nil:
				return
			}
		}
		if !once {
			stalled.Done()
		}
		io.Copy(io.Discard, c)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := newRelay(up)
	s := &Server{Handler: r, Loops: 1, MaxPipes: budget, Log: slog.New(slog.DiscardHandler)}
	// The loops are made here, not in Serve's goroutine: the test posts to
	// one below, and nothing else orders its reading of s.loops after
	// their making.
	s.start()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() { s.Close(); <-served; s.Stop() })

	var d net.Dialer
	var clients []net.Conn
	for range conns {
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	done := make(chan struct{})
	go func() { stalled.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the connections did not stall within 60 s")
	}
	// Two turns of the loop: what had arrived by now has been read and
	// moved as far as the clients' full buffers let it.
	for range 2 {
		ran := make(chan struct{})
		s.loops[0].post(func() { close(ran) })
		<-ran
	}
	if n := pipeFDs(t) - base; n > 2*budget {
		t.Errorf("%d more pipe descriptors with %d stalled connections and MaxPipes %d (at most %d)", n, conns, budget, 2*budget)
	}
	if n := s.pipes.Load(); n > budget {
		t.Errorf("%d pipes counted in use, over MaxPipes %d", n, budget)
	}
	for i, c := range clients {
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		if n, err := io.ReadFull(c, make([]byte, size)); err != nil {
			t.Fatalf("client %d read %d of %d bytes: %v", i, n, size, err)
		}
	}
}

// pipeFDs counts this process's descriptors that are pipes.
func pipeFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}
