package testbed

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric is the value of the series name with exactly labels in reg (a
// gauge, counter or untyped metric; a histogram's sample count), and
// whether that series exists.
func Metric(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; !ok || v != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Untyped != nil:
				return m.GetUntyped().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
			return 0, true
		}
	}
	return 0, false
}

// Scrape returns the body of GET http://addr/metrics, retrying for up to
// 20 s while the server is not up yet or its accept loop backs off.
func Scrape(t testing.TB, addr string) string {
	t.Helper()
	cl := http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := cl.Get("http://" + addr + "/metrics")
		if err == nil {
			var body []byte
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				return string(body)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("scrape %s: %v", addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
