package loglimit

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(3, 10*time.Second, func() time.Time { return now })
	var allowed []int
	for i := range 10 {
		if ok, _ := l.Allow(); ok {
			allowed = append(allowed, i)
		}
	}
	if len(allowed) != 3 {
		t.Fatalf("allowed %v in one window, want 3", allowed)
	}
	now = now.Add(10 * time.Second)
	ok, suppressed := l.Allow()
	if !ok || suppressed != 7 {
		t.Fatalf("next window: allow = %v, suppressed %d; want true, 7", ok, suppressed)
	}
	if _, s := l.Allow(); s != 0 {
		t.Fatalf("suppressed reported twice: %d", s)
	}
}
