package origin

import (
	"sync"
	"time"
)

// verdict is the trust policy's decision on a connection once its first
// bytes are known.
type verdict struct {
	result string // "" to go on (parse the header, or forward as is)
	msg    string // log message when refused
}

// judge applies DESIGN.md §3's trust rules to a connection from a source
// that is (or is not) inside trusted_edges and whose first bytes are k.
// untrusted: reject is decided earlier, before any byte is read.
func judge(trusted bool, k kind, requireHeader bool) verdict {
	switch {
	case !trusted && k != kindNone:
		return verdict{ResultSpoofed, "spoofed proxy header"}
	case trusted && k == kindNone && requireHeader:
		return verdict{ResultNoHeader, "proxy header required"}
	}
	return verdict{}
}

// limiter lets through at most burst log lines per window and counts the
// rest, so a flood of spoofed or broken headers cannot flood the log. The
// next line let through reports how many were suppressed.
type limiter struct {
	mu         sync.Mutex
	now        func() time.Time
	window     time.Duration
	burst      int
	start      time.Time
	n          int
	suppressed int
}

func newLimiter(burst int, window time.Duration, now func() time.Time) *limiter {
	return &limiter{now: now, window: window, burst: burst}
}

// allow reports whether a line may be written now and, if so, how many
// were suppressed since the last one.
func (l *limiter) allow() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.now(); now.Sub(l.start) >= l.window {
		l.start, l.n = now, 0
	}
	if l.n >= l.burst {
		l.suppressed++
		return false, 0
	}
	l.n++
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
