package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// originRegistry is a registry with what an origin's /metrics carries
// for Rates: the front's gauge of active connections and its per-edge
// refusals.
func originRegistry(t *testing.T) (*prometheus.Registry, *prometheus.CounterVec) {
	t.Helper()
	reg := prometheus.NewRegistry()
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: RefusedMetric, Help: "refused per edge"}, []string{"edge", "reason"})
	reg.MustRegister(refused, prometheus.NewGauge(prometheus.GaugeOpts{Name: originMetric, Help: "active"}))
	return reg, refused
}

// serveMetrics serves h on a loopback port until the test ends; before
// each answer it calls each() (nil: nothing).
func serveMetrics(t *testing.T, h http.Handler, each func()) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if each != nil {
			each()
		}
		h.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// steppingClock returns start, start+step, start+2·step, … at each call.
func steppingClock(step time.Duration) func() time.Time {
	var mu sync.Mutex
	at := time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now := at
		at = at.Add(step)
		return now
	}
}

// TestRefusedSamplerRates reads a real registry's counter through a real
// HTTP endpoint (promhttp, as the origin serves it) twice, 2 s apart by
// the injected clock: between the reads 192.0.2.11 was refused 40 by rate
// and 20 by concurrency, 2001:db8::11 10 by rate, the untrusted sources
// 1000 (not an edge), and 192.0.2.12 nothing since its 5.
func TestRefusedSamplerRates(t *testing.T) {
	reg, refused := originRegistry(t)
	refused.WithLabelValues("192.0.2.12", "rate").Add(5)
	var reads atomic.Int32
	addr := serveMetrics(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), func() {
		n := reads.Add(1)
		refused.WithLabelValues("192.0.2.11", "rate").Add(40)
		refused.WithLabelValues("192.0.2.11", "conns").Add(20)
		refused.WithLabelValues("::ffff:192.0.2.13", "rate").Add(2) // unmapped: 192.0.2.13
		refused.WithLabelValues("untrusted", "rate").Add(1000)
		if n == 2 {
			refused.WithLabelValues("2001:db8::11", "rate").Add(10) // a series new in the second read
		}
	})
	s := RefusedSampler{Endpoint: addr, Interval: time.Millisecond, Now: steppingClock(2 * time.Second)}
	rates, err := s.Rates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]float64{
		netip.MustParseAddr("192.0.2.11"):   30,
		netip.MustParseAddr("192.0.2.13"):   1,
		netip.MustParseAddr("2001:db8::11"): 5,
	}
	if len(rates) != len(want) {
		t.Fatalf("rates %v, want %v", rates, want)
	}
	for a, v := range want {
		if rates[a] != v {
			t.Errorf("rate of %s: %v, want %v (all: %v)", a, rates[a], v, rates)
		}
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads, want 2", n)
	}
}

// TestRefusedSamplerErrors: whatever makes the rates unknown is an error
// naming origin.metrics, never a number: a counter gone down between the
// reads (the origin restarted), an endpoint that is not an origin's, one
// that wants a token, one that does not answer. A front that refused
// nothing yet (no series at all) is a rate of 0 for every edge.
func TestRefusedSamplerErrors(t *testing.T) {
	restarted := func(t *testing.T) string {
		reg, refused := originRegistry(t)
		refused.WithLabelValues("192.0.2.11", "rate").Add(100)
		var n atomic.Int32
		h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
		return serveMetrics(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) > 1 { // a fresh process: its counters start again from 0
				fresh, c := originRegistry(t)
				c.WithLabelValues("192.0.2.11", "rate").Add(3)
				promhttp.HandlerFor(fresh, promhttp.HandlerOpts{}).ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(w, r)
		}), nil)
	}
	notOrigin := func(t *testing.T) string {
		reg := prometheus.NewRegistry()
		reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: ActiveConnsMetric, Help: "an edge's"}))
		return serveMetrics(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil)
	}
	token := func(t *testing.T) string {
		return serveMetrics(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "token", http.StatusUnauthorized)
		}), nil)
	}
	closed := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		return ln.Addr().String()
	}
	for _, c := range []struct {
		name     string
		endpoint func(*testing.T) string
		want     string
	}{
		{"restarted", restarted, `edgefleet_front_edge_refused_total{edge="192.0.2.11",reason="rate"} went down between two reads 2.0 s apart (the origin restarted?)`},
		{"not an origin", notOrigin, "no edgefleet_origin_connections_active: not an origin's metrics"},
		{"token", token, "401 Unauthorized"},
		{"closed", closed, "connection refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := RefusedSampler{Endpoint: c.endpoint(t), Interval: time.Millisecond, Now: steppingClock(2 * time.Second)}
			rates, err := s.Rates(context.Background())
			if err == nil || !strings.HasPrefix(err.Error(), "origin.metrics: ") || !strings.Contains(err.Error(), c.want) || rates != nil {
				t.Fatalf("Rates: %v, %v; want an error with %q", rates, err, c.want)
			}
		})
	}
	t.Run("nothing refused", func(t *testing.T) {
		reg, _ := originRegistry(t)
		s := RefusedSampler{Endpoint: serveMetrics(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil), Interval: time.Millisecond}
		rates, err := s.Rates(context.Background())
		if err != nil || len(rates) != 0 {
			t.Fatalf("Rates: %v, %v; want none and no error", rates, err)
		}
	})
}

// TestStatusRefused: the origin is read while the probes run (status
// takes the longer of the two, not their sum); an unreadable origin makes
// every row "?" and null in JSON, with the reason returned, and without a
// RefusedFunc the column is "-".
func TestStatusRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := validConfig()
		cfg.Edges = []Edge{e2}
		live := RRSet{A: addrs("192.0.2.2")}
		probe := func(context.Context, string) ProbeResult {
			time.Sleep(2 * time.Second)
			return ProbeResult{OK: true, HandshakeMS: 1}
		}
		refused := func(context.Context) (map[netip.Addr]float64, error) {
			time.Sleep(time.Second)
			return map[netip.Addr]float64{netip.MustParseAddr("192.0.2.2"): 7.5}, nil
		}
		start := time.Now()
		rows, err := Status(context.Background(), cfg, NewState(), live, nil, probe, nil, refused)
		if took := time.Since(start); err != nil || took != 2*time.Second {
			t.Fatalf("Status took %v (err %v), want 2s: the origin read while the probes ran", took, err)
		}
		if rows[0].Refused == nil || *rows[0].Refused != 7.5 || rows[0].refusedText() != "7.5/s" {
			t.Fatalf("row: %+v", rows[0])
		}

		broken := errors.New("origin.metrics: metrics http://192.0.2.9:9102/metrics: connection refused")
		rows, err = Status(context.Background(), cfg, NewState(), live, nil, probe, nil,
			func(context.Context) (map[netip.Addr]float64, error) { return nil, broken })
		if err != broken || rows[0].Refused != nil || rows[0].refusedText() != "?" || rows[0].State != StateActive {
			t.Fatalf("unreadable: err %v, row %+v", err, rows[0])
		}
		var b bytes.Buffer
		if err := PrintStatusJSON(&b, rows); err != nil || !strings.Contains(b.String(), `"refused": null,`) {
			t.Fatalf("json: %v\n%s", err, b.String())
		}
		var back struct{ Edges []map[string]any }
		if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Edges[0]["refused"] != nil {
			t.Fatalf("json refused: %v %v", err, back)
		}

		rows, err = Status(context.Background(), cfg, NewState(), live, nil, probe, nil, nil)
		if err != nil || rows[0].Refused != nil || rows[0].refusedText() != "-" {
			t.Fatalf("without origin.metrics: err %v, row %+v", err, rows[0])
		}
	})
}

// refusedText renders counts as an origin's /metrics would (the text
// format, through expfmt), with the origin's own gauge.
func refusedText(t testing.TB, counts map[refusedKey]float64) []byte {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: RefusedMetric, Help: "x"}, []string{"edge", "reason"})
	reg.MustRegister(c, prometheus.NewGauge(prometheus.GaugeOpts{Name: originMetric, Help: "x"}))
	for k, v := range counts {
		c.WithLabelValues(k.edge.String(), k.reason).Add(v)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}
