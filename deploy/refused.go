package deploy

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/netip"
	"time"

	"github.com/edgefleet/edgefleet/internal/clock"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// RefusedMetric is the origin front's counter of the connections it
// refused per edge (label edge: the address it measured, or "untrusted")
// and reason (rate, conns): what `fleet status` shows per edge.
const RefusedMetric = "edgefleet_front_edge_refused_total"

// originMetric is a family every origin's /metrics carries (a plain gauge,
// there from the start): an endpoint without it is not an origin's.
const originMetric = "edgefleet_origin_connections_active"

// RefusedInterval is how far apart `fleet status` reads origin.metrics
// twice to make each edge's refused per second: short, so status is not
// slower than its probes (their budget is 2 s by default), long enough
// that a flood's count is well above one connection.
const RefusedInterval = time.Second

// maxMetricsBody bounds what a metrics read takes in; a longer answer is
// an error, never a cut one whose missing series would read as zero.
const maxMetricsBody = 32 << 20

// RefusedFunc reads the connections the origin refused per second, per
// edge address.
type RefusedFunc func(ctx context.Context) (map[netip.Addr]float64, error)

// RefusedSampler reads the origin's metrics endpoint twice, Interval
// apart, and makes from RefusedMetric each edge's refused connections per
// second.
type RefusedSampler struct {
	Endpoint string        // origin.metrics: host:port or a URL (MetricsURL)
	Interval time.Duration // 0 is RefusedInterval
	// Now, if non-nil, is used instead of time.Now.
	Now func() time.Time
}

// Refused is the sampler of origin.metrics; nil when the key is not set.
func (o Origin) Refused() RefusedFunc {
	if o.Metrics == "" {
		return nil
	}
	return RefusedSampler{Endpoint: o.Metrics}.Rates
}

// Refused is every origin host's refusals summed by edge address (the
// hosts with metrics; nil when none has): an edge refused by one host of
// the pool is refused for the agents that land there.
func (c Config) Refused() RefusedFunc {
	var fns []RefusedFunc
	for _, h := range c.Hosts() {
		if f := h.Refused(); f != nil {
			fns = append(fns, f)
		}
	}
	switch len(fns) {
	case 0:
		return nil
	case 1:
		return fns[0]
	}
	return func(ctx context.Context) (map[netip.Addr]float64, error) {
		sum := map[netip.Addr]float64{}
		for _, f := range fns {
			m, err := f(ctx)
			if err != nil {
				return nil, err
			}
			for a, v := range m {
				sum[a] += v
			}
		}
		return sum, nil
	}
}

// refusedKey is one series of RefusedMetric.
type refusedKey struct {
	edge   netip.Addr
	reason string
}

// Rates are the connections per second the origin refused from each edge
// address between two reads; an address it refused none from is absent.
// A series that went down or away between the reads (the origin
// restarted) makes an error: the rates are unknown, never guessed.
func (s RefusedSampler) Rates(ctx context.Context) (map[netip.Addr]float64, error) {
	first, t1, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	interval := s.Interval
	if interval <= 0 {
		interval = RefusedInterval
	}
	select {
	case <-time.After(interval):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	second, t2, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	elapsed := t2.Sub(t1).Seconds()
	if elapsed <= 0 {
		return nil, fmt.Errorf("origin.metrics: two reads %v apart: no rate", t2.Sub(t1))
	}
	return refusedRates(first, second, elapsed)
}

// read scrapes the endpoint once; at is when its answer was read.
func (s RefusedSampler) read(ctx context.Context) (counts map[refusedKey]float64, at time.Time, err error) {
	err = getMetrics(ctx, s.Endpoint, "", func(body io.Reader) error {
		counts, err = parseRefused(body)
		return err
	})
	if err != nil {
		return nil, at, fmt.Errorf("origin.metrics: %w", err)
	}
	return counts, clock.Now(s.Now), nil
}

// refusedRates are the per-address rates from two reads elapsed seconds
// apart, each address's reasons summed. A series new in the second read
// started at zero since the first.
func refusedRates(first, second map[refusedKey]float64, elapsed float64) (map[netip.Addr]float64, error) {
	for k, v := range first {
		if w, ok := second[k]; !ok || w < v {
			return nil, fmt.Errorf("origin.metrics: %s{edge=%q,reason=%q} went down between two reads %.1f s apart (the origin restarted?)",
				RefusedMetric, k.edge, k.reason, elapsed)
		}
	}
	rates := map[netip.Addr]float64{}
	for k, w := range second {
		if d := w - first[k]; d > 0 {
			rates[k.edge] += d / elapsed
		}
	}
	return rates, nil
}

// parseRefused reads RefusedMetric's series from one answer of an
// origin's metrics endpoint (Prometheus text exposition format), by edge
// address and reason; the edge "untrusted" (not an edge) and any value of
// edge that is not an IP address are left out. An answer without the
// origin's own families is an error (origin.metrics names another
// endpoint); without RefusedMetric it is zero series: a front that has
// refused nothing exports none.
func parseRefused(r io.Reader) (map[refusedKey]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	if _, ok := fams[originMetric]; !ok {
		return nil, fmt.Errorf("no %s: not an origin's metrics", originMetric)
	}
	counts := map[refusedKey]float64{}
	fam, ok := fams[RefusedMetric]
	if !ok {
		return counts, nil
	}
	if fam.GetType() != dto.MetricType_COUNTER {
		return nil, fmt.Errorf("%s is a %s, not a counter", RefusedMetric, fam.GetType())
	}
	for _, m := range fam.GetMetric() {
		k, ok := refusedKeyOf(m)
		if !ok {
			continue
		}
		v := m.GetCounter().GetValue()
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return nil, fmt.Errorf("%s{edge=%q}: %v is not a count", RefusedMetric, k.edge, v)
		}
		if _, dup := counts[k]; dup {
			return nil, fmt.Errorf("%s{edge=%q,reason=%q} twice", RefusedMetric, k.edge, k.reason)
		}
		counts[k] = v
	}
	return counts, nil
}

// refusedKeyOf is the series' edge address and reason; ok false for an
// edge label that is not an address (such as "untrusted").
func refusedKeyOf(m *dto.Metric) (refusedKey, bool) {
	var k refusedKey
	var edge string
	for _, l := range m.GetLabel() {
		switch l.GetName() {
		case "edge":
			edge = l.GetValue()
		case "reason":
			k.reason = l.GetValue()
		}
	}
	a, err := netip.ParseAddr(edge)
	if err != nil {
		ap, perr := netip.ParseAddrPort(edge)
		if perr != nil {
			return k, false
		}
		a = ap.Addr()
	}
	k.edge = a.Unmap().WithZone("")
	return k, true
}
