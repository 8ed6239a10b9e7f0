package relay

import (
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	dto "github.com/prometheus/client_model/go"
)

// TestDialSecondsNeverNegative: with a clock that moves 1 ms at each
// reading, every dial (a refused one and the accepted ones, which on
// loopback start and end within one turn of the loop) takes 1 ms or more,
// so edgefleet_edge_origin_dial_seconds has no observation under 0.5 ms
// and a positive sum. Timed from the loop's reading of the wake-up, which
// comes before the dial starts, each observation would be negative.
func TestDialSecondsNeverNegative(t *testing.T) {
	o := startOrigin(t, true, echo)
	dead := testbed.FreeAddr(t, "127.0.0.1")
	clock := testbed.NewClock(time.Unix(1e9, 0)).Tick(time.Millisecond)
	e := startEdge(t, Config{Origins: OriginList(dead, o.addr)}, func(e *Edge) { e.Now = clock.Now })
	const n = 20
	for range n {
		if got := roundTrip(t, e.addr, "ping"); got != "ping" {
			t.Fatalf("round trip = %q", got)
		}
	}
	e.waitValue(t, n+1, "edgefleet_edge_origin_dial_seconds") // the refused dial and n accepted ones
	h := e.histogram(t, "edgefleet_edge_origin_dial_seconds")
	if h.GetSampleSum() <= 0 {
		t.Errorf("dial seconds sum = %v, want > 0", h.GetSampleSum())
	}
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 0.0005 && b.GetCumulativeCount() != 0 {
			t.Errorf("%d dials under 0.5 ms with a clock that moves 1 ms a reading", b.GetCumulativeCount())
		}
	}
}

// histogram is the unlabelled histogram name.
func (te *testEdge) histogram(t *testing.T, name string) *dto.Histogram {
	t.Helper()
	mfs, err := te.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no histogram %s", name)
	return nil
}
