package deploy

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgefleet/edgefleet/internal/clock"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// The fleet's metric families (docs/monitoring.md), labelled name (the
// FQDN) and, but for DNSUpMetric, family ("ipv4", "ipv6").
const (
	// DNSRecordsMetric: the addresses the authoritative server answers
	// for the name (A, AAAA). Absent while the server cannot be read, so
	// that an unreachable server never looks like an empty set.
	DNSRecordsMetric = "edgefleet_fleet_dns_records"
	// InventoryEdgesMetric: the edges of fleet.yaml with an address of
	// the family.
	InventoryEdgesMetric = "edgefleet_fleet_inventory_edges"
	// DNSUpMetric: 1 when the last read of the authoritative server
	// answered, 0 when it failed (timeout, refused, not authoritative…).
	DNSUpMetric = "edgefleet_fleet_dns_up"
	// DNSMissingMetric: addresses of the inventory's edges the server
	// does not answer. Absent while it cannot be read.
	DNSMissingMetric = "edgefleet_fleet_dns_missing_records"
	// DNSUnknownMetric: addresses the server answers that no edge of the
	// inventory has. Absent while it cannot be read.
	DNSUnknownMetric = "edgefleet_fleet_dns_unknown_records"
	// DNSUnknownAddressMetric: 1 for each of those addresses, labelled
	// name, family and address, so that an alert names the stranger.
	DNSUnknownAddressMetric = "edgefleet_fleet_dns_unknown_address"
)

var (
	dnsRecordsDesc = prometheus.NewDesc(DNSRecordsMetric,
		"Addresses the authoritative DNS server answers for the name (A: ipv4, AAAA: ipv6); absent while it cannot be read.",
		[]string{"name", "family"}, nil)
	inventoryEdgesDesc = prometheus.NewDesc(InventoryEdgesMetric,
		"Edges of the inventory (fleet.yaml) with an address of the family.",
		[]string{"name", "family"}, nil)
	dnsUpDesc = prometheus.NewDesc(DNSUpMetric,
		"1 when the last read of the name from the authoritative DNS server answered, 0 when it failed.",
		[]string{"name"}, nil)
	dnsMissingDesc = prometheus.NewDesc(DNSMissingMetric,
		"Addresses of the inventory's edges the authoritative DNS server does not answer for the name; absent while it cannot be read.",
		[]string{"name", "family"}, nil)
	dnsUnknownDesc = prometheus.NewDesc(DNSUnknownMetric,
		"Addresses the authoritative DNS server answers for the name that no edge of the inventory has; absent while it cannot be read.",
		[]string{"name", "family"}, nil)
	dnsUnknownAddressDesc = prometheus.NewDesc(DNSUnknownAddressMetric,
		"1 for each address the authoritative DNS server answers for the name that no edge of the inventory has.",
		[]string{"name", "family", "address"}, nil)
)

// Exporter is the fleet's desired state against DNS's live one, as
// Prometheus metrics: a prometheus.Collector that, when scraped, loads the
// inventory and reads the name's A/AAAA set from the authoritative server
// (what `fleet dns list` shows), and compares the two sets: the
// inventory's addresses DNS lacks, and each address DNS answers that no
// edge has. One result answers every scrape for
// MaxAge, and concurrent scrapes share one read, so a scrape storm sends
// the server one pair of queries per MaxAge at most.
//
//	x := &deploy.Exporter{Inventory: load, Read: read}
//	reg.MustRegister(x)
type Exporter struct {
	// Inventory returns fleet.yaml as it is now (validated). When it
	// fails, the last inventory that loaded is used and the error logged:
	// an operator's half-edited file does not blank the metrics.
	Inventory func() (Config, error)
	// Read asks the authoritative server for the set of cfg.Name.
	Read func(ctx context.Context, cfg Config) (RRSet, error)
	// Timeout bounds one read (5 s when zero): a scrape never hangs on a
	// server that does not answer.
	Timeout time.Duration
	// MaxAge is how long a result answers scrapes (5 s when zero, none
	// when negative).
	MaxAge time.Duration
	// Now, if non-nil, is used instead of time.Now (internal/clock): the
	// clock of a result's MaxAge and of the repeated warning lines.
	Now func() time.Time
	// Log gets a line when the server stops answering (again every 5
	// minutes while it does not) and when it answers again, and when the
	// inventory fails to load (nil: slog.Default()).
	Log *slog.Logger

	mu      sync.Mutex
	inv     *Config // the last inventory that loaded
	invErr  string  // the last inventory error logged
	last    exported
	at      time.Time
	scraped bool
	// dnsDown: the last read failed; dnsWarned: when that was last logged.
	dnsDown   bool
	dnsWarned time.Time
}

// dnsWarnEvery is how often a server that keeps failing is logged again.
const dnsWarnEvery = 5 * time.Minute

// exported is one scrape's values.
type exported struct {
	name      string
	edges     [2]int // ipv4, ipv6
	dnsUp     bool
	records   [2]int
	missing   [2]int       // inventory addresses DNS does not answer
	unknown   []netip.Addr // DNS addresses no edge has, sorted
	inventory bool         // an inventory ever loaded
}

var families = [2]string{"ipv4", "ipv6"}

// Describe sends the families' descriptions.
func (x *Exporter) Describe(ch chan<- *prometheus.Desc) {
	ch <- dnsRecordsDesc
	ch <- inventoryEdgesDesc
	ch <- dnsUpDesc
	ch <- dnsMissingDesc
	ch <- dnsUnknownDesc
	ch <- dnsUnknownAddressDesc
}

// Collect sends the metrics of a fresh (or at most MaxAge old) result.
func (x *Exporter) Collect(ch chan<- prometheus.Metric) {
	e := x.result()
	if !e.inventory {
		return
	}
	for i, fam := range families {
		ch <- prometheus.MustNewConstMetric(inventoryEdgesDesc, prometheus.GaugeValue, float64(e.edges[i]), e.name, fam)
	}
	up := 0.0
	if e.dnsUp {
		up = 1
		var unknown [2]int
		for _, a := range e.unknown {
			unknown[famIndex(a.Is4())]++
			ch <- prometheus.MustNewConstMetric(dnsUnknownAddressDesc, prometheus.GaugeValue, 1, e.name, families[famIndex(a.Is4())], a.String())
		}
		for i, fam := range families {
			ch <- prometheus.MustNewConstMetric(dnsRecordsDesc, prometheus.GaugeValue, float64(e.records[i]), e.name, fam)
			ch <- prometheus.MustNewConstMetric(dnsMissingDesc, prometheus.GaugeValue, float64(e.missing[i]), e.name, fam)
			ch <- prometheus.MustNewConstMetric(dnsUnknownDesc, prometheus.GaugeValue, float64(unknown[i]), e.name, fam)
		}
	}
	ch <- prometheus.MustNewConstMetric(dnsUpDesc, prometheus.GaugeValue, up, e.name)
}

func (x *Exporter) now() time.Time {
	return clock.Now(x.Now)
}

func (x *Exporter) log() *slog.Logger {
	if x.Log != nil {
		return x.Log
	}
	return slog.Default()
}

// result returns the cached result while it is fresh, else measures
// again. The lock is held throughout, so concurrent scrapes wait for the
// one read and then share it.
func (x *Exporter) result() exported {
	x.mu.Lock()
	defer x.mu.Unlock()
	maxAge := x.MaxAge
	if maxAge == 0 {
		maxAge = 5 * time.Second
	}
	if x.scraped && maxAge > 0 && x.now().Sub(x.at) < maxAge {
		return x.last
	}
	x.last = x.measure()
	x.at, x.scraped = x.now(), true
	return x.last
}

// measure loads the inventory and reads the server.
func (x *Exporter) measure() exported {
	cfg, err := x.Inventory()
	switch {
	case err != nil:
		if msg := err.Error(); msg != x.invErr {
			x.invErr = msg
			x.log().Warn("fleet.yaml does not load: the metrics keep the last inventory that did", "err", err)
		}
	default:
		if x.invErr != "" {
			x.log().Info("fleet.yaml loads again")
			x.invErr = ""
		}
		x.inv = &cfg
	}
	if x.inv == nil {
		return exported{}
	}
	cfg = *x.inv
	e := exported{name: strings.TrimSuffix(cfg.Name, "."), inventory: true}
	want := map[netip.Addr]bool{}
	for _, edge := range cfg.Edges {
		for _, a := range edge.Addrs() {
			e.edges[famIndex(a.Is4())]++
			want[a] = true
		}
	}
	timeout := x.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := x.now()
	set, err := x.Read(ctx, cfg)
	if err != nil {
		// Once when the server stops answering, then every few minutes:
		// the errors differ by their source port, so comparing them would
		// log every scrape.
		if !x.dnsDown || x.now().Sub(x.dnsWarned) >= dnsWarnEvery {
			x.dnsDown, x.dnsWarned = true, x.now()
			x.log().Warn("dns read failed", "target", cfg.DNS.Server, "err", err, "duration", x.now().Sub(start))
		}
		return e
	}
	if x.dnsDown {
		x.log().Info("dns read answers again", "target", cfg.DNS.Server, "duration", x.now().Sub(start))
		x.dnsDown = false
	}
	e.dnsUp = true
	e.records = [2]int{len(set.A), len(set.AAAA)}
	// The sets, not their sizes: a record replaced by a stranger's
	// leaves both counts equal.
	for a := range want {
		if !set.Has(a) {
			e.missing[famIndex(a.Is4())]++
		}
	}
	for _, a := range set.Addrs() {
		if !want[a] && !slices.Contains(e.unknown, a) {
			e.unknown = append(e.unknown, a)
		}
	}
	sortAddrs(e.unknown)
	return e
}

// famIndex is the index of ipv4 (true) or ipv6 in families.
func famIndex(is4 bool) int {
	if is4 {
		return 0
	}
	return 1
}

var _ prometheus.Collector = (*Exporter)(nil)

// ReadOnlyPublisher is a Publisher for the inventory that only reads the
// name's set (Read): it needs no TSIG key, so the exporter can run
// without the secret that updates the zone.
func ReadOnlyPublisher(c Config) *Publisher {
	return &Publisher{Server: c.DNS.Server, Zone: dns.CanonicalName(c.Zone), Name: dns.CanonicalName(c.Name)}
}
