package clock

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestNow: an injected clock is used; nil is the runtime's clock (in a
// synctest bubble its fake one, which is what servers' tests rely on).
func TestNow(t *testing.T) {
	at := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	if got := Now(func() time.Time { return at }); !got.Equal(at) {
		t.Fatalf("Now(f) = %v, want %v", got, at)
	}
	synctest.Test(t, func(t *testing.T) {
		start := Now(nil)
		time.Sleep(time.Hour)
		if d := Now(nil).Sub(start); d != time.Hour {
			t.Fatalf("Now(nil) moved %v across a one-hour sleep in a bubble, want exactly 1h", d)
		}
	})
}
