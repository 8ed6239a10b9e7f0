// Package loglimit rate-limits log lines: a flood of refused connections,
// accept errors or refused updates is counted, not written line by line.
package loglimit

import (
	"sync"
	"time"
)

// Limiter lets through at most burst log lines per window and counts the
// rest, so a flood (of refused connections, of accept errors) cannot flood
// the log. The next line let through reports how many were suppressed.
type Limiter struct {
	mu         sync.Mutex
	now        func() time.Time
	window     time.Duration
	burst      int
	start      time.Time
	n          int
	suppressed int
}

// New returns a limiter of burst lines per window; now nil is
// time.Now.
func New(burst int, window time.Duration, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, window: window, burst: burst}
}

// Allow reports whether a line may be written now and, if so, how many
// were suppressed since the last one.
func (l *Limiter) Allow() (ok bool, suppressed int) {
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

// The refusal lines of every server (the edge, the front, the fleet's DNS
// server): at most RefusalBurst lines per RefusalWindow, the next one
// saying how many were suppressed. Ten lines show what is being refused;
// a flood, or a spoofed packet per second, writes no more.
const (
	RefusalBurst  = 10
	RefusalWindow = 10 * time.Second
)

// Refusals returns a limiter of refusal lines on the clock now (nil:
// time.Now).
func Refusals(now func() time.Time) *Limiter {
	return New(RefusalBurst, RefusalWindow, now)
}
