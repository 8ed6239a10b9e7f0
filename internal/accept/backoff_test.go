package accept

import (
	"testing"
	"time"
)

// TestNextBackoff: 5 ms after a success, doubling, never above 1 s.
func TestNextBackoff(t *testing.T) {
	var got []time.Duration
	var d time.Duration
	for range 10 {
		d = NextBackoff(d)
		got = append(got, d)
	}
	ms := time.Millisecond
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
}
