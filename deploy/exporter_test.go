package deploy

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/prometheus/client_golang/prometheus"
)

// exporterFixture is an Exporter over a fake inventory and a fake server
// (the real ones are cmd/fleet's TestExporter): the cache and the failure
// reporting are pure logic.
type exporterFixture struct {
	x     *Exporter
	reg   *prometheus.Registry
	clock *testbed.Clock
	logs  *testbed.Buffer
	reads atomic.Int32

	mu     sync.Mutex
	cfg    Config
	cfgErr error
	set    RRSet
	err    error
}

func newExporterFixture(t *testing.T) *exporterFixture {
	f := &exporterFixture{reg: prometheus.NewRegistry(), clock: testbed.NewClock(time.Unix(1_800_000_000, 0)), logs: &testbed.Buffer{}}
	f.cfg = DefaultConfig()
	f.cfg.Name, f.cfg.Zone, f.cfg.DNS.Server = "ldap.example.test.", "example.test", "192.0.2.53:53" // the label has no trailing dot
	f.cfg.Edges = []Edge{{Name: "e1", IPv4: "192.0.2.1", IPv6: "2001:db8::1"}, {Name: "e2", IPv4: "192.0.2.2"}, {Name: "e3", IPv4: "192.0.2.3"}}
	f.set = RRSet{A: ipList("192.0.2.1", "192.0.2.2"), AAAA: ipList("2001:db8::1")}
	f.x = &Exporter{
		Inventory: func() (Config, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.cfg, f.cfgErr
		},
		Read: func(ctx context.Context, cfg Config) (RRSet, error) {
			f.reads.Add(1)
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.set, f.err
		},
		Now: f.clock.Now,
		Log: slog.New(slog.NewJSONHandler(f.logs, nil)),
	}
	f.reg.MustRegister(f.x)
	return f
}

func ipList(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// want checks one series: value v, or absent when v < 0.
func (f *exporterFixture) want(t *testing.T, name string, labels map[string]string, v float64) {
	t.Helper()
	got, ok := testbed.Metric(t, f.reg, name, labels)
	switch {
	case v < 0 && ok:
		t.Errorf("%s%v = %v, want no such series", name, labels, got)
	case v >= 0 && (!ok || got != v):
		t.Errorf("%s%v = %v (present %v), want %v", name, labels, got, ok, v)
	}
}

func fam(f string) map[string]string {
	return map[string]string{"name": "ldap.example.test", "family": f}
}

var nameOnly = map[string]string{"name": "ldap.example.test"}

// TestExporterValues: the inventory's edges and the server's records per
// family, and dns_up 1.
func TestExporterValues(t *testing.T) {
	f := newExporterFixture(t)
	f.want(t, InventoryEdgesMetric, fam("ipv4"), 3)
	f.want(t, InventoryEdgesMetric, fam("ipv6"), 1)
	f.want(t, DNSRecordsMetric, fam("ipv4"), 2)
	f.want(t, DNSRecordsMetric, fam("ipv6"), 1)
	f.want(t, DNSUpMetric, nameOnly, 1)
}

// TestExporterComparesSets: a record replaced by a stranger's keeps the
// counts equal (3 = 3) but not the sets: one inventory address missing,
// one unknown, and the unknown address exported by name; all three are
// absent while the server cannot be read.
func TestExporterComparesSets(t *testing.T) {
	f := newExporterFixture(t)
	f.x.MaxAge = -1
	f.set = RRSet{A: ipList("192.0.2.1", "192.0.2.2", "198.51.100.9"), AAAA: ipList("2001:db8::1")}
	f.want(t, DNSRecordsMetric, fam("ipv4"), 3)
	f.want(t, InventoryEdgesMetric, fam("ipv4"), 3)
	f.want(t, DNSMissingMetric, fam("ipv4"), 1)
	f.want(t, DNSUnknownMetric, fam("ipv4"), 1)
	f.want(t, DNSMissingMetric, fam("ipv6"), 0)
	f.want(t, DNSUnknownMetric, fam("ipv6"), 0)
	f.want(t, DNSUnknownAddressMetric, map[string]string{"name": "ldap.example.test", "family": "ipv4", "address": "198.51.100.9"}, 1)
	f.want(t, DNSUnknownAddressMetric, map[string]string{"name": "ldap.example.test", "family": "ipv4", "address": "192.0.2.1"}, -1)

	f.mu.Lock()
	f.err = errors.New("dns: read ldap.example.test. A from 192.0.2.53:53: connection refused")
	f.mu.Unlock()
	f.want(t, DNSMissingMetric, fam("ipv4"), -1)
	f.want(t, DNSUnknownMetric, fam("ipv4"), -1)
	f.want(t, DNSUnknownAddressMetric, map[string]string{"name": "ldap.example.test", "family": "ipv4", "address": "198.51.100.9"}, -1)
}

// TestExporterDNSDown: a failed read is dns_up 0 with no records series
// (never a set of zero), logged once when it starts and again every 5
// minutes however many scrapes see it, and a line when the server
// answers again.
func TestExporterDNSDown(t *testing.T) {
	f := newExporterFixture(t)
	f.err = errors.New("dns: read ldap.example.test. A from 192.0.2.53:53: connection refused")
	for range 3 {
		f.want(t, DNSUpMetric, nameOnly, 0)
		f.want(t, DNSRecordsMetric, fam("ipv4"), -1)
		f.want(t, DNSRecordsMetric, fam("ipv6"), -1)
		f.want(t, InventoryEdgesMetric, fam("ipv4"), 3)
		f.clock.Advance(time.Minute)
	}
	if l := f.logs.JSONLines("dns read failed"); len(l) != 1 || !strings.Contains(l[0]["err"].(string), "connection refused") || l[0]["target"] != "192.0.2.53:53" {
		t.Errorf("dns read failed lines: %v", l)
	}
	f.clock.Advance(2 * time.Minute) // 5 minutes since the first line
	f.want(t, DNSUpMetric, nameOnly, 0)
	if l := f.logs.JSONLines("dns read failed"); len(l) != 2 {
		t.Errorf("a server down for 5 minutes is logged again: %d lines", len(l))
	}
	f.mu.Lock()
	f.err, f.set = nil, RRSet{}
	f.mu.Unlock()
	f.clock.Advance(time.Minute)
	f.want(t, DNSUpMetric, nameOnly, 1)
	f.want(t, DNSRecordsMetric, fam("ipv4"), 0) // an empty set, really answered
	if l := f.logs.JSONLines("dns read answers again"); len(l) != 1 {
		t.Errorf("dns read answers again lines: %v", l)
	}
}

// TestExporterCache: one read answers every scrape for MaxAge (5 s by
// default), concurrent scrapes share one read, and a result older than
// MaxAge is read again.
func TestExporterCache(t *testing.T) {
	f := newExporterFixture(t)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := f.reg.Gather(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := f.reads.Load(); n != 1 {
		t.Fatalf("20 concurrent scrapes made %d reads, want 1", n)
	}
	f.mu.Lock()
	f.set.A = ipList("192.0.2.1")
	f.mu.Unlock()
	f.clock.Advance(4 * time.Second)
	f.want(t, DNSRecordsMetric, fam("ipv4"), 2) // still the cached read
	f.clock.Advance(time.Second)
	f.want(t, DNSRecordsMetric, fam("ipv4"), 1)
	if n := f.reads.Load(); n != 2 {
		t.Fatalf("%d reads, want 2", n)
	}

	f.x.MaxAge = -1 // no cache: every scrape reads
	f.reg.Gather()
	f.reg.Gather()
	if n := f.reads.Load(); n != 4 {
		t.Fatalf("without a cache: %d reads, want 4", n)
	}
}

// TestExporterTimeout: the read gets a context bounded by Timeout, and a
// read that runs out of it is dns_up 0.
func TestExporterTimeout(t *testing.T) {
	f := newExporterFixture(t)
	f.x.Timeout = 50 * time.Millisecond
	var deadline bool
	f.x.Read = func(ctx context.Context, cfg Config) (RRSet, error) {
		_, deadline = ctx.Deadline()
		<-ctx.Done()
		return RRSet{}, ctx.Err()
	}
	f.want(t, DNSUpMetric, nameOnly, 0)
	if !deadline {
		t.Fatal("the read's context has no deadline")
	}
}

// TestExporterBadInventory: a fleet.yaml that stops loading keeps the last
// inventory that did (logged once), and one that loads again is used.
func TestExporterBadInventory(t *testing.T) {
	f := newExporterFixture(t)
	f.want(t, InventoryEdgesMetric, fam("ipv4"), 3)
	f.mu.Lock()
	f.cfgErr = errors.New(`config fleet.yaml: unknown key "edges[1].ipv5"`)
	f.mu.Unlock()
	for range 2 {
		f.clock.Advance(time.Minute)
		f.want(t, InventoryEdgesMetric, fam("ipv4"), 3)
		f.want(t, DNSUpMetric, nameOnly, 1)
	}
	if l := f.logs.JSONLines("fleet.yaml does not load: the metrics keep the last inventory that did"); len(l) != 1 {
		t.Errorf("inventory error lines: %v", l)
	}
	f.mu.Lock()
	f.cfgErr = nil
	f.cfg.Edges = f.cfg.Edges[:1]
	f.mu.Unlock()
	f.clock.Advance(time.Minute)
	f.want(t, InventoryEdgesMetric, fam("ipv4"), 1)
	f.want(t, InventoryEdgesMetric, fam("ipv6"), 1)

	// Before any inventory loaded there is nothing to report.
	g := newExporterFixture(t)
	g.cfgErr = errors.New("open fleet.yaml: no such file or directory")
	if mfs, _ := g.reg.Gather(); len(mfs) != 0 || g.reads.Load() != 0 {
		t.Fatalf("without an inventory: %d families, %d reads", len(mfs), g.reads.Load())
	}
}
