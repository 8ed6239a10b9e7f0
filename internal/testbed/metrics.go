package testbed

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric is the value of the series name with exactly labels in reg (a
// gauge, counter or untyped metric), and whether that series exists.
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
			}
			return 0, true
		}
	}
	return 0, false
}
