package relay

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"golang.org/x/sys/unix"
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestKeyTableConnsAndRate checks one key's cap and bucket exactly, and
// that another key of the table is untouched.
func TestKeyTableConnsAndRate(t *testing.T) {
	tb := newKeyTable(KeyLimit{V4: 32, V6: 64, Conns: 3, Rate: "1/s", Burst: 4}, minTableSize)
	now := time.Unix(1000, 0)
	var slots []int32
	for i := range 3 {
		s, r := tb.take(addr("192.0.2.1"), now, "per_source")
		if r != nil {
			t.Fatalf("connection %d refused: %v", i+1, r)
		}
		slots = append(slots, s)
	}
	if _, r := tb.take(addr("192.0.2.1"), now, "per_source"); r == nil || r.result != ResultConnLimit || r.limit != "per_source.conns" {
		t.Fatalf("4th open connection: %v, want conn-limit per_source.conns", r)
	}
	tb.put(slots[0])
	s, r := tb.take(addr("192.0.2.1"), now, "per_source") // the 4th token of the burst
	if r != nil {
		t.Fatalf("after a close: %v", r)
	}
	tb.put(s)
	if _, r := tb.take(addr("192.0.2.1"), now, "per_source"); r == nil || r.result != ResultRateLimited {
		t.Fatalf("5th new connection in the same instant: %v, want rate-limited", r)
	}
	if _, r := tb.take(addr("192.0.2.2"), now, "per_source"); r != nil {
		t.Fatalf("another source: %v", r)
	}
	now = now.Add(time.Second)
	if s, r = tb.take(addr("192.0.2.1"), now, "per_source"); r != nil {
		t.Fatalf("a second later: %v", r)
	}
	tb.put(s)
	if _, r := tb.take(addr("192.0.2.1"), now, "per_source"); r == nil {
		t.Fatal("two in the second after the burst: want rate-limited")
	}
}

// TestKeyTablePrefixKeys checks the masking: /24 and /48 keys, an IPv4-
// mapped address counted as its IPv4 address by admit.
func TestKeyTablePrefixKeys(t *testing.T) {
	tb := newKeyTable(KeyLimit{V4: 24, V6: 48, Conns: 1}, minTableSize)
	now := time.Unix(1000, 0)
	if _, r := tb.take(addr("198.51.100.7"), now, "per_prefix"); r != nil {
		t.Fatal(r)
	}
	if _, r := tb.take(addr("198.51.100.200"), now, "per_prefix"); r == nil {
		t.Fatal("second address of the same /24 admitted past conns 1")
	}
	if _, r := tb.take(addr("198.51.101.7"), now, "per_prefix"); r != nil {
		t.Fatalf("another /24: %v", r)
	}
	if _, r := tb.take(addr("2001:db8:1:2::1"), now, "per_prefix"); r != nil {
		t.Fatal(r)
	}
	if _, r := tb.take(addr("2001:db8:1:ffff::9"), now, "per_prefix"); r == nil {
		t.Fatal("second address of the same /48 admitted past conns 1")
	}
	a := newAdmission(Limits{PerSource: KeyLimit{V4: 32, V6: 64, Conns: 1}, TableSize: minTableSize})
	if _, r := a.admit(addr("::ffff:203.0.113.5"), now); r != nil {
		t.Fatal(r)
	}
	if _, r := a.admit(addr("203.0.113.5"), now); r == nil {
		t.Fatal("the IPv4 address admitted beside its IPv4-mapped spelling past conns 1")
	}
}

// TestKeyTableBounded checks that the table never holds more than its
// size: unpinned keys are recycled least recently used first, a key with
// open connections is never, and a table full of open keys refuses.
func TestKeyTableBounded(t *testing.T) {
	const size = minTableSize
	tb := newKeyTable(KeyLimit{V4: 32, V6: 64, Conns: 2, Rate: "1/h", Burst: 1}, size)
	now := time.Unix(1000, 0)
	pinned, _ := tb.take(addr("192.0.2.1"), now, "per_source") // held open throughout
	for i := range 10 * size {
		a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 16), byte(i >> 8), byte(i), 0, 15: 1})
		s, r := tb.take(a, now, "per_source")
		if r != nil {
			t.Fatalf("new source %v: %v", a, r)
		}
		tb.put(s)
		if n := tb.len(); n > size {
			t.Fatalf("%d keys in a table of %d", n, size)
		}
	}
	if _, r := tb.take(addr("192.0.2.1"), now, "per_source"); r == nil || r.result != ResultRateLimited {
		t.Fatalf("the pinned source after the churn: %v, want its empty bucket kept (rate-limited)", r)
	}
	tb.put(pinned)
	// Fill every slot with an open connection: the next new key is refused.
	for i := range size {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if _, r := tb.take(a, now.Add(time.Hour), "per_source"); r != nil {
			t.Fatalf("filling: %v", r)
		}
	}
	if _, r := tb.take(addr("10.200.0.1"), now.Add(time.Hour), "per_source"); r == nil || r.limit != "per_source.table_size" {
		t.Fatalf("a new key with every slot open: %v, want refused per_source.table_size", r)
	}
}

// TestKeyTableBytesPerEntry measures what a full table costs, for
// docs/edge.md (about 104 bytes a key; 131072 keys: about 13.6 MB a table).
func TestKeyTableBytesPerEntry(t *testing.T) {
	const size = 1 << 16
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tb := newKeyTable(KeyLimit{V4: 32, V6: 64, Rate: "20/s"}, size)
	now := time.Unix(1000, 0)
	for i := range size {
		a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 16), byte(i >> 8), byte(i), 0, 15: 1})
		tb.take(a, now, "per_source")
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / size
	t.Logf("%.0f bytes per key (%d keys)", per, tb.len())
	if tb.len() != size {
		t.Fatalf("%d keys, want %d", tb.len(), size)
	}
	if per > 256 {
		t.Errorf("%.0f bytes per key: docs/edge.md says about 104", per)
	}
	runtime.KeepAlive(tb)
}

// relayed reports whether c's bytes came back through the origin (an
// echo), false when the edge closed it.
func relayed(c net.Conn) bool {
	if _, err := c.Write([]byte("x")); err != nil {
		return false
	}
	b := make([]byte, 1)
	_, err := io.ReadFull(c, b)
	return err == nil
}

// countingOrigin is an echoing origin that counts the connections it was
// given.
func countingOrigin(t *testing.T) (*testOrigin, *atomic.Int64) {
	var n atomic.Int64
	o := startOrigin(t, true, func(c originConn) { n.Add(1); echo(c) })
	return o, &n
}

// TestPerSourceLimitsExact runs a real edge with limits on real loopback
// connections from distinct source addresses: the cap of open
// connections and the rate per source are exact, a refused connection is
// never relayed (the origin does not see it), and other sources and
// prefixes keep theirs.
func TestPerSourceLimitsExact(t *testing.T) {
	o, seen := countingOrigin(t)
	clk := testbed.NewClock(time.Unix(1_000_000, 0))
	lim := Limits{
		PerSource: KeyLimit{V4: 32, V6: 64, Conns: 3, Rate: "1/m", Burst: 5},
		PerPrefix: KeyLimit{V4: 24, V6: 48, Conns: 6},
		TableSize: minTableSize,
	}
	e := startEdge(t, Config{Origins: OriginList(o.addr), Limits: lim, MaxConns: minTableSize}, func(e *Edge) { e.Now = clk.Now })

	var open []net.Conn
	for i := range 3 {
		c := testbed.DialFrom(t, "127.0.3.1", e.addr)
		if !relayed(c) {
			t.Fatalf("connection %d of the source not relayed", i+1)
		}
		open = append(open, c)
	}
	if relayed(testbed.DialFrom(t, "127.0.3.1", e.addr)) {
		t.Fatal("4th open connection of the source relayed past per_source.conns 3")
	}
	e.waitValue(t, 1, "edgefleet_edge_connections_total", "result", ResultConnLimit)
	open[0].Close()
	e.waitValue(t, 2, "edgefleet_edge_connections_active")
	for i := range 2 { // tokens 4 and 5 of the burst, each closed after
		c := testbed.DialFrom(t, "127.0.3.1", e.addr)
		if !relayed(c) {
			t.Fatalf("new connection %d after a close not relayed", i+4)
		}
		c.Close()
		e.waitValue(t, 2, "edgefleet_edge_connections_active")
	}
	if relayed(testbed.DialFrom(t, "127.0.3.1", e.addr)) {
		t.Fatal("6th new connection in the same minute relayed past burst 5")
	}
	e.waitValue(t, 1, "edgefleet_edge_connections_total", "result", ResultRateLimited)
	if !relayed(testbed.DialFrom(t, "127.0.3.2", e.addr)) {
		t.Fatal("another source of the same /24 refused")
	}
	clk.Advance(time.Minute)
	if !relayed(testbed.DialFrom(t, "127.0.3.1", e.addr)) {
		t.Fatal("a minute later the source is still refused")
	}
	// The /24 holds 4 open connections: two more fill per_prefix.conns 6.
	for _, src := range []string{"127.0.3.10", "127.0.3.11"} {
		if !relayed(testbed.DialFrom(t, src, e.addr)) {
			t.Fatalf("%s refused with the /24 under per_prefix.conns", src)
		}
	}
	if relayed(testbed.DialFrom(t, "127.0.3.12", e.addr)) {
		t.Fatal("a 7th connection of the /24 relayed past per_prefix.conns 6")
	}
	e.waitValue(t, 2, "edgefleet_edge_connections_total", "result", ResultConnLimit)
	if !relayed(testbed.DialFrom(t, "127.0.4.1", e.addr)) {
		t.Fatal("a source of another /24 refused")
	}
	if got := seen.Load(); got != 10 {
		t.Errorf("the origin saw %d connections, want the 10 admitted", got)
	}
	if lines := e.logs.JSONLines("connection refused: over a limit"); len(lines) == 0 || lines[0]["client"] == nil || lines[0]["limit"] == nil {
		t.Errorf("refusal log lines: %v", lines)
	}
}

// TestAcceptRate checks the edge's ceiling: many sources, each under its
// own limits, still get through at accept_rate at most.
func TestAcceptRate(t *testing.T) {
	o, _ := countingOrigin(t)
	clk := testbed.NewClock(time.Unix(1_000_000, 0))
	lim := Limits{PerSource: KeyLimit{V4: 32, V6: 64, Rate: "10/s"}, AcceptRate: "3/h", AcceptBurst: 3, TableSize: minTableSize}
	e := startEdge(t, Config{Origins: OriginList(o.addr), Limits: lim, MaxConns: minTableSize}, func(e *Edge) { e.Now = clk.Now })
	admitted := 0
	for i := range 6 {
		if relayed(testbed.DialFrom(t, fmt.Sprintf("127.0.5.%d", i+1), e.addr)) {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("%d of 6 sources admitted, want accept_rate's burst 3", admitted)
	}
	e.waitValue(t, 3, "edgefleet_edge_connections_total", "result", ResultRateLimited)
	if strings.Count(e.logs.String(), `"limit":"accept_rate"`) == 0 {
		t.Errorf("no refusal line names accept_rate:\n%s", e.logs.String())
	}
}

// TestLaterRefusalCostsNothing checks that a connection refused by the
// edge's ceiling gives its prefix back the token it took: the prefix's
// next source, once the ceiling has room, is admitted.
func TestLaterRefusalCostsNothing(t *testing.T) {
	a := newAdmission(Limits{PerPrefix: KeyLimit{V4: 24, V6: 48, Rate: "1/h", Burst: 2}, AcceptRate: "1/s", AcceptBurst: 1,
		TableSize: minTableSize})
	now := time.Unix(1000, 0)
	if _, r := a.admit(addr("192.0.2.1"), now); r != nil {
		t.Fatal(r)
	}
	if _, r := a.admit(addr("192.0.2.2"), now); r == nil || r.limit != "accept_rate" {
		t.Fatalf("second in the same instant: %v, want refused by accept_rate", r)
	}
	if _, r := a.admit(addr("192.0.2.3"), now.Add(time.Second)); r != nil {
		t.Fatalf("a second later the /24 has spent one of its 2 tokens only: %v", r)
	}
	if _, r := a.admit(addr("192.0.2.4"), now.Add(2*time.Second)); r == nil || r.limit != "per_prefix.rate" {
		t.Fatalf("the third of the /24: %v, want per_prefix.rate", r)
	}
}

// TestLimitsValidate checks that every bad value names its key.
func TestLimitsValidate(t *testing.T) {
	good := DefaultLimits()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for want, mut := range map[string]func(*Limits){
		"limits.per_source.rate":  func(l *Limits) { l.PerSource.Rate = "fast" },
		"limits.per_source.burst": func(l *Limits) { l.PerSource.Burst = -1 },
		"limits.per_prefix.v4":    func(l *Limits) { l.PerPrefix.V4 = 33 },
		"limits.per_prefix.v6":    func(l *Limits) { l.PerPrefix.V6 = 0 },
		"limits.per_prefix.conns": func(l *Limits) { l.PerPrefix.Conns = -2 },
		"limits.accept_rate":      func(l *Limits) { l.AcceptRate = "9/d" },
		"limits.table_size":       func(l *Limits) { l.TableSize = 10 },
	} {
		l := DefaultLimits()
		mut(&l)
		if err := l.Validate(); err == nil || !strings.HasPrefix(err.Error(), want+":") {
			t.Errorf("%s: %v", want, err)
		}
	}
	if err := (Limits{}).Validate(); err != nil {
		t.Errorf("no limits at all: %v", err)
	}
	c := DefaultConfig()
	c.Origins, c.MaxConns, c.Limits.TableSize = OriginList("192.0.2.9:636"), 200000, 131072
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "limits.table_size: 131072 is below max_conns 200000") {
		t.Errorf("table_size below max_conns: %v", err)
	}
}

// TestTableBoundedUnderIPv6Flood sends real connections from 100,000
// distinct IPv6 sources (each its own /64; a local route in a namespace
// makes the whole 2001:db8::/32 this host's) to a real edge listening in
// that namespace: the source table never holds more than table_size keys,
// and every connection past the edge's accept_rate is refused without a
// dial.
func TestTableBoundedUnderIPv6Flood(t *testing.T) {
	ns := testbed.NewNetns(t, "v6flood")
	ns.Run("ip", "-6", "route", "add", "local", "2001:db8::/32", "dev", "lo")
	ln := ns.Listen("[::1]:0")
	o, seen := countingOrigin(t)
	const table = minTableSize * 4
	lim := Limits{
		PerSource:   KeyLimit{V4: 32, V6: 64, Conns: 4, Rate: "1/h", Burst: 1},
		PerPrefix:   KeyLimit{V4: 24, V6: 48, Conns: 1 << 20},
		AcceptRate:  "10/h",
		AcceptBurst: 10,
		TableSize:   table,
	}
	e := serveEdge(t, Config{Origins: OriginList(o.addr), Limits: lim}, ln)
	const sources = 100_000
	var mu sync.Mutex
	var maxSeen int
	deadline := time.Now().Add(3 * time.Minute)
	var wg sync.WaitGroup
	var sent atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := ns.Do(func() error {
				for i := w; i < sources && time.Now().Before(deadline); i += 4 {
					if err := connectFrom(v6Source(i), ln.Addr().(*net.TCPAddr)); err != nil {
						return err
					}
					sent.Add(1)
					if i%5000 == 0 {
						s, _ := e.adm.entries()
						mu.Lock()
						maxSeen = max(maxSeen, s)
						mu.Unlock()
					}
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := sent.Load(); n != sources {
		t.Fatalf("%d of %d connections sent in 3 minutes", n, sources)
	}
	e.waitValue(t, sources-10, "edgefleet_edge_connections_total", "result", ResultRateLimited)
	s, p := e.adm.entries()
	if s > table || maxSeen > table {
		t.Fatalf("the source table holds %d keys (at most %d seen during the flood), table_size %d", s, maxSeen, table)
	}
	if got := e.value(t, "edgefleet_edge_limit_table_entries", "table", "source"); got != float64(s) || s != table {
		t.Fatalf("edgefleet_edge_limit_table_entries{table=source} = %v (table %d), want %d: a flood of new sources fills it, never past", got, s, table)
	}
	t.Logf("source table %d keys, prefix table %d keys after %d sources", s, p, sources)
	if got := seen.Load(); got != 10 {
		t.Errorf("the origin saw %d connections, want accept_rate's 10", got)
	}
}

// v6Source is the i-th flood source: 2001:db8:HHHH:LLLL::1, one /64 each.
func v6Source(i int) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i), 15: 1})
}

// connectFrom opens a TCP connection from src (IPV6_FREEBIND: an address
// of the namespace's local route, never assigned) to to, waits for the
// edge to close it and closes it: one socket, no goroutine.
func connectFrom(src netip.Addr, to *net.TCPAddr) error {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	unix.SetsockoptInt(fd, unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
	unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 20})
	if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: src.As16()}); err != nil {
		return fmt.Errorf("bind %v: %w", src, err)
	}
	var dst unix.SockaddrInet6
	copy(dst.Addr[:], to.IP.To16())
	dst.Port = to.Port
	if err := unix.Connect(fd, &dst); err != nil {
		return fmt.Errorf("connect from %v: %w", src, err)
	}
	unix.Shutdown(fd, unix.SHUT_WR) // an admitted one: the origin's echo ends
	var b [1]byte
	if _, err := unix.Read(fd, b[:]); err == unix.EAGAIN {
		return fmt.Errorf("from %v: the edge did not close the connection in 20 s", src)
	}
	return nil
}
