package probe

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestMeasureBoundsParallel: a DNS answer with more addresses than
// MaxParallel never has more than MaxParallel probes (sockets) in flight,
// and every address is still probed.
func TestMeasureBoundsParallel(t *testing.T) {
	n := 3*MaxParallel + 7
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	var inFlight, peak, calls atomic.Int64
	probe := func(ctx context.Context, addr string) Result {
		calls.Add(1)
		cur := inFlight.Add(1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		inFlight.Add(-1)
		return Result{Addr: addr, OK: true}
	}
	out := Measure(context.Background(), addrs, 636, probe)
	if len(out) != n || calls.Load() != int64(n) {
		t.Fatalf("%d results, %d probes, want %d", len(out), calls.Load(), n)
	}
	if p := peak.Load(); p > MaxParallel || p < 2 {
		t.Fatalf("%d probes in flight at once, want 2..%d", p, MaxParallel)
	}
}
