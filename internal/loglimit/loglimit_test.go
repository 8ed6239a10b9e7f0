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

// TestRefusals checks the refusal policy every server shares: ten lines
// per ten seconds.
func TestRefusals(t *testing.T) {
	now := time.Unix(1000, 0)
	l := Refusals(func() time.Time { return now })
	for i := range 12 {
		if ok, _ := l.Allow(); ok != (i < 10) {
			t.Fatalf("line %d: allow = %v", i, ok)
		}
	}
	now = now.Add(9 * time.Second)
	if ok, _ := l.Allow(); ok {
		t.Fatal("allowed before ten seconds")
	}
	now = now.Add(time.Second)
	if ok, suppressed := l.Allow(); !ok || suppressed != 3 {
		t.Fatalf("after ten seconds: allow = %v, suppressed %d; want true, 3", ok, suppressed)
	}
}
