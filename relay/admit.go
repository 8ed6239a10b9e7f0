package relay

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/edgefleet/edgefleet/internal/evloop"
	"github.com/edgefleet/edgefleet/internal/tokenbucket"
)

// Limits is the edge's admission (limits: in the file, docs/edge.md): a
// connection over one of them is closed at once, before any origin is
// dialled. The zero value limits nothing; DefaultConfig's are safe for an
// agent fleet.
type Limits struct {
	// PerSource bounds each source address (an IPv4 /32, an IPv6 /64).
	PerSource KeyLimit `mapstructure:"per_source"`
	// PerPrefix bounds each source prefix (an IPv4 /24, an IPv6 /48).
	PerPrefix KeyLimit `mapstructure:"per_prefix"`
	// AcceptRate is the edge's ceiling of new connections ("N/s", "N/m",
	// "N/h"; "0": none), AcceptBurst its bucket (0: one second's worth).
	AcceptRate  string `mapstructure:"accept_rate"`
	AcceptBurst int    `mapstructure:"accept_burst"`
	// TableSize is how many keys each of the two tables (sources,
	// prefixes) remembers at most: the memory bound whatever the number
	// of sources.
	TableSize int `mapstructure:"table_size"`
}

// KeyLimit is the limit of one key of a table: the prefix lengths that
// make the key, the connections it may hold open and its rate of new
// ones. Conns 0 and Rate "0" limit nothing.
type KeyLimit struct {
	V4    int    `mapstructure:"v4"`    // IPv4 prefix length of the key
	V6    int    `mapstructure:"v6"`    // IPv6 prefix length of the key
	Conns int    `mapstructure:"conns"` // open connections at most; 0: no cap
	Rate  string `mapstructure:"rate"`  // new connections: "N/s", "N/m", "N/h"; "0": none
	Burst int    `mapstructure:"burst"` // the rate's bucket; 0: one second's worth
}

// DefaultLimits are DefaultConfig's limits: 64 connections and 20 new
// ones a second (burst 40) per source, 512 and 200 a second per /24 or
// /48, 2000 a second for the whole edge, 131072 keys per table.
func DefaultLimits() Limits {
	return Limits{
		PerSource:   KeyLimit{V4: 32, V6: 64, Conns: 64, Rate: "20/s", Burst: 40},
		PerPrefix:   KeyLimit{V4: 24, V6: 48, Conns: 512, Rate: "200/s", Burst: 400},
		AcceptRate:  "2000/s",
		AcceptBurst: 4000,
		TableSize:   1 << 17,
	}
}

// minTableSize keeps a table big enough to hold the agents of one edge.
const minTableSize = 1024

// Validate names the first bad value by its key.
func (l Limits) Validate() error {
	for _, k := range []struct {
		key string
		kl  KeyLimit
	}{{"limits.per_source", l.PerSource}, {"limits.per_prefix", l.PerPrefix}} {
		if err := k.kl.validate(); err != nil {
			return fmt.Errorf("%s.%w", k.key, err)
		}
	}
	if _, err := rateOf(l.AcceptRate, l.AcceptBurst); err != nil {
		return fmt.Errorf("limits.accept_%w", err)
	}
	if l.on() && l.TableSize < minTableSize {
		return fmt.Errorf("limits.table_size: %d is below %d", l.TableSize, minTableSize)
	}
	return nil
}

func (k KeyLimit) validate() error {
	switch {
	case k.on() && (k.V4 < 1 || k.V4 > 32):
		return fmt.Errorf("v4: prefix length %d is outside 1-32", k.V4)
	case k.on() && (k.V6 < 1 || k.V6 > 128):
		return fmt.Errorf("v6: prefix length %d is outside 1-128", k.V6)
	case k.Conns < 0:
		return fmt.Errorf("conns: %d is negative (0: no cap)", k.Conns)
	}
	_, err := rateOf(k.Rate, k.Burst)
	return err
}

// rateOf reads a rate and its burst; the error starts with the key
// ("rate: …", "burst: …").
func rateOf(rate string, burst int) (tokenbucket.Rate, error) {
	per, err := tokenbucket.ParseRate(rate)
	if err != nil {
		return tokenbucket.Rate{}, fmt.Errorf("rate: %w", err)
	}
	if burst < 0 {
		return tokenbucket.Rate{}, fmt.Errorf("burst: %d is negative (0: one second's worth)", burst)
	}
	b := float64(burst)
	if b == 0 {
		b = per
	}
	return tokenbucket.Rate{PerSec: per, Burst: b}, nil
}

func (k KeyLimit) on() bool {
	r, _ := tokenbucket.ParseRate(k.Rate)
	return k.Conns > 0 || r > 0
}

func (l Limits) on() bool {
	r, _ := tokenbucket.ParseRate(l.AcceptRate)
	return l.PerSource.on() || l.PerPrefix.on() || r > 0
}

// admission is the edge's state of its limits: two tables of keys and the
// edge's own bucket. Its methods are called from every loop.
type admission struct {
	source, prefix *keyTable // nil: that level limits nothing
	accept         tokenbucket.Rate
	mu             sync.Mutex
	acceptBucket   tokenbucket.Bucket
}

// ticket is what an admitted connection holds in the tables: released
// when it closes.
type ticket struct{ source, prefix int32 }

// noSlot is a ticket's slot in a table that did not count it.
const noSlot = -1

// Refusal reasons: the limit that refused a connection (its log field
// "limit") and the result it is counted under.
type refusal struct{ limit, result string }

func newAdmission(l Limits) *admission {
	a := &admission{}
	if l.PerSource.on() {
		a.source = newKeyTable(l.PerSource, l.TableSize)
	}
	if l.PerPrefix.on() {
		a.prefix = newKeyTable(l.PerPrefix, l.TableSize)
	}
	a.accept, _ = rateOf(l.AcceptRate, l.AcceptBurst)
	return a
}

// admit counts a new connection from src at now, most specific limit
// first so that a source over its own limit spends nothing of its
// prefix's or of the edge's; a level that refuses gives back what the
// levels before it took (tokens included), so a refusal by the prefix or
// by the edge costs the source nothing either: ok, or the refusal.
func (a *admission) admit(src netip.Addr, now time.Time) (ticket, *refusal) {
	t := ticket{noSlot, noSlot}
	src = src.Unmap()
	var r *refusal
	if t.source, r = a.source.take(src, now, "per_source"); r != nil {
		return t, r
	}
	if t.prefix, r = a.prefix.take(src, now, "per_prefix"); r != nil {
		a.source.refund(t.source)
		return ticket{noSlot, noSlot}, r
	}
	if !a.accept.Unlimited() {
		a.mu.Lock()
		ok := a.acceptBucket.Allow(now, a.accept)
		a.mu.Unlock()
		if !ok {
			a.source.refund(t.source)
			a.prefix.refund(t.prefix)
			return ticket{noSlot, noSlot}, &refusal{"accept_rate", ResultRateLimited}
		}
	}
	return t, nil
}

// release gives back what t holds.
func (a *admission) release(t ticket) {
	a.source.put(t.source)
	a.prefix.put(t.prefix)
}

// entries is how many keys each table holds now.
func (a *admission) entries() (source, prefix int) {
	return a.source.len(), a.prefix.len()
}

// admit applies the limits to a connection Open took: false when it was
// refused (closed, counted, logged rate-limited).
func (e *Edge) admit(c *evloop.Conn, rc *conn) bool {
	if e.adm == nil {
		return true
	}
	t, r := e.adm.admit(c.Peer().Addr(), e.now())
	if r == nil {
		rc.ticket, rc.held = t, true
		return true
	}
	e.m.total[r.result].Inc()
	if ok, suppressed := e.shell.Refusals.Allow(); ok {
		e.log.Warn("connection refused: over a limit", "client", c.Peer().String(), "limit", r.limit,
			"result", r.result, "suppressed", suppressed)
	}
	c.Close(reasonCounted, nil)
	return false
}
