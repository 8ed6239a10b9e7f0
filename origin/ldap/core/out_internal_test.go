package core

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/prometheus/client_golang/prometheus"
)

// pipeSession is a session (of a plain-mode core) whose client is the
// far end of a net.Pipe, which takes nothing until that end reads, with
// its output running. Called in a synctest bubble, the writer's deadlines
// and the stall timer run in the bubble's time.
func pipeSession(t *testing.T) (*session, net.Conn, *testbed.Buffer) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ProxyMode, cfg.DefaultServer = 0, "127.0.0.1:1"
	logs := &testbed.Buffer{}
	srv, err := New(cfg, nil, nil, slog.New(slog.NewJSONHandler(logs, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c, peer := net.Pipe()
	ss := newSession(srv, c, Peer{ID: "test"})
	ss.out = newClientOut(ss)
	return ss, peer, logs
}

// answer queues raw for the client as a handler does; it reports whether
// the session is still on.
func answer(ss *session, raw []byte) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.write(raw)
	ss.settle()
	return !ss.ended
}

func ended(ss *session) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.ended
}

func held(ss *session) int64 {
	ss.out.mu.Lock()
	defer ss.out.mu.Unlock()
	return ss.out.held()
}

// A client that takes nothing is left alone while up to MaxQueued is
// queued behind the PDU it is reading, and with more behind it than that
// until a whole StallWindow has passed without it taking a byte; then it
// is cut, the line naming the rule.
func TestStalledClientCutAfterStallWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ss, peer, logs := pipeSession(t)
		defer peer.Close()
		pdu := bytes.Repeat([]byte{'x'}, 2<<20)
		// The first is the one being written; 6 MiB queued behind it.
		for i := range 4 {
			if !answer(ss, pdu) {
				t.Fatalf("cut at answer %d of 4, %d bytes held: %s", i+1, held(ss), logs)
			}
		}
		time.Sleep(StallWindow - time.Millisecond)
		synctest.Wait()
		if ended(ss) {
			t.Fatalf("cut before a StallWindow passed: %s", logs)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !ended(ss) {
			t.Fatal("not cut a StallWindow after it fell MaxQueued behind, having taken nothing")
		}
		cut := logs.JSONLines("client stopped reading: disconnected")
		if len(cut) != 1 || cut[0]["err"] != errStalled.Error() {
			t.Fatalf("lines %v, want one with err %q", cut, errStalled)
		}
		<-ss.out.done
	})
}

// A client that keeps reading, however slowly (one 64 KiB piece every
// StallWindow less a millisecond, 20 MiB in all), with up to 20 MiB
// queued for it, is never cut and gets every byte in order; once it stops,
// it is cut between one and two StallWindows after its last read.
func TestReadingClientNotCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ss, peer, logs := pipeSession(t)
		defer peer.Close()
		var want []byte
		for i := range 20 {
			p := bytes.Repeat([]byte{byte('a' + i)}, 1<<20)
			want = append(want, p...)
			if !answer(ss, p) {
				t.Fatalf("cut at answer %d of 20: %s", i+1, logs)
			}
		}
		var got []byte
		buf := make([]byte, writePiece)
		read := func() {
			time.Sleep(StallWindow - time.Millisecond)
			n, err := io.ReadFull(peer, buf)
			if err != nil {
				t.Fatalf("after %d bytes: %v; %s", len(got), err, logs)
			}
			got = append(got, buf[:n]...)
		}
		for len(got) < len(want)/2 {
			read()
		}
		if ended(ss) || !bytes.Equal(got, want[:len(got)]) {
			t.Fatalf("a reading client: cut %v, bytes in order %v; %s", ended(ss), bytes.Equal(got, want[:len(got)]), logs)
		}
		last := time.Now()
		time.Sleep(StallWindow - time.Millisecond)
		synctest.Wait()
		if ended(ss) {
			t.Fatalf("cut less than a StallWindow after its last read: %s", logs)
		}
		time.Sleep(time.Until(last.Add(2*StallWindow + time.Millisecond)))
		synctest.Wait()
		if !ended(ss) || len(logs.JSONLines("client stopped reading: disconnected")) != 1 {
			t.Fatalf("not cut two StallWindows after its last read (cut %v): %s", ended(ss), logs)
		}
		<-ss.out.done
	})
}

// The session never holds more than MaxHeld for its client: a client
// that takes nothing gets 4 MiB answers until the one that would pass
// MaxHeld (132 MiB by default, 33 of them), which cuts it at once,
// whatever the StallWindow.
func TestMaxHeldEnforced(t *testing.T) {
	for _, tc := range []struct {
		maxPDU int
		want   int64
	}{
		{4 << 20, 132 << 20},
		{100 << 20, 204 << 20}, // a max_pdu over MaxBackendPDU is what a server may send
	} {
		cfg := DefaultConfig()
		cfg.MaxPDU = tc.maxPDU
		if got := cfg.MaxHeld(); got != tc.want {
			t.Errorf("MaxHeld with max_pdu %d: %d, want %d", tc.maxPDU, got, tc.want)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		ss, peer, logs := pipeSession(t)
		defer peer.Close()
		if ss.out.ceiling != DefaultConfig().MaxHeld() {
			t.Fatalf("the session's ceiling is %d, not MaxHeld %d", ss.out.ceiling, DefaultConfig().MaxHeld())
		}
		pdu := bytes.Repeat([]byte{'x'}, 4<<20)
		n := 0
		for answer(ss, pdu) {
			if n++; held(ss) > ss.out.ceiling {
				t.Fatalf("%d bytes held after %d answers, over MaxHeld %d", held(ss), n, ss.out.ceiling)
			}
		}
		if n != 33 {
			t.Errorf("cut after %d answers of 4 MiB, want 33 (132 MiB)", n)
		}
		cut := logs.JSONLines("client too far behind: disconnected")
		want := fmt.Sprintf("more than %d bytes held for the client", DefaultConfig().MaxHeld())
		if len(cut) != 1 || !strings.Contains(fmt.Sprint(cut[0]["err"]), want) {
			t.Fatalf("lines %v, want one with err %q", cut, want)
		}
		<-ss.out.done
	})
}
