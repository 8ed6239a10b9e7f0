package accept

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

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
