package accept

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLocalResources(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}, true},
		{fmt.Errorf("dial origin: %w", syscall.ENFILE), true},
		{syscall.ENOBUFS, true},
		{syscall.ENOMEM, true},
		{os.NewSyscallError("connect", syscall.EADDRNOTAVAIL), true}, // no ephemeral port left
		{os.NewSyscallError("epoll_ctl", syscall.ENOSPC), true},      // max_user_watches
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false},
		{syscall.ETIMEDOUT, false},
		// The resolver keeps its socket's failure as text only.
		{fmt.Errorf("dial origin o1: %w", &net.DNSError{Err: "dial udp 127.0.0.53:53: socket: too many open files", Name: "origin.example.net", Server: "127.0.0.53:53"}), true},
		{&net.DNSError{Err: "dial udp 127.0.0.53:53: socket: no buffer space available", Name: "origin.example.net"}, true},
		{&net.DNSError{Err: "no such host", Name: "origin.example.net", IsNotFound: true}, false},
		{&net.DNSError{Err: "server misbehaving", Name: "origin.example.net", IsTemporary: true}, false},
		{nil, false},
	} {
		if got := LocalResources(tc.err); got != tc.want {
			t.Errorf("LocalResources(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestErrorLog: net/http's lines go through slog, one per window, and the
// next one says how many were suppressed.
func TestErrorLog(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	l := ErrorLog(slog.New(slog.NewTextHandler(&buf, nil)), "metrics server error", func() time.Time { return now })
	for range 5 {
		l.Printf("http: Accept error: accept tcp 127.0.0.1:9: accept4: too many open files; retrying in 5ms")
	}
	now = now.Add(logWindow)
	l.Printf("http: Accept error: again")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %d:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], `msg="metrics server error" err="http: Accept error: accept tcp 127.0.0.1:9: accept4: too many open files; retrying in 5ms" suppressed=0`) {
		t.Errorf("first line: %s", lines[0])
	}
	if !strings.Contains(lines[1], "suppressed=4") {
		t.Errorf("second line: %s", lines[1])
	}
}
