package core_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/go-ldap/ldap/v3"
)

// Load balancers (docs/balancers.md, seed 003) against real slapds, with
// go-ldap as the client.

// lbDLP is dlpFile with MonitorInterval (seconds) in its Defaults.
func lbDLP(connect, retry int, monitor float64, servers []server, objects ...string) string {
	return strings.Replace(dlpFile(connect, retry, servers, objects...), `"MonitorInterval": 3600`, fmt.Sprintf(`"MonitorInterval": %g`, monitor), 1)
}

// named lists the slapds as L1, L2, …
func named(sl []*testbed.Slapd) []server {
	out := make([]server, len(sl))
	for i, s := range sl {
		out[i] = server{"L" + strconv.Itoa(i+1), s.Addr, false}
	}
	return out
}

// allBalanced is lbDLP for the servers sl with one LoadBalancer object,
// lb, named name, which balances every user's operations.
func allBalanced(sl []*testbed.Slapd, connect, retry int, monitor float64, name, lb string) string {
	return lbDLP(connect, retry, monitor, named(sl), lb,
		balanceTo("UserRouting", "ALL", "(user=*)", name),
		proxy([]string{"ALL"}, nil))
}

// balanceTo is a rule whose action is balance(lb).
func balanceTo(typ, name, cond, lb string) string {
	return fmt.Sprintf(`{"object": "ProxyRule", "ruleType": %q, "name": %q, "condition": %q, "actions": ["balance(%s)"]}`, typ, name, cond, lb)
}

// sample is one series of a metric: its labels and value.
type sample struct {
	labels map[string]string
	value  float64
}

// series reads the samples of a metric family of the harness's registry.
func (h *harness) series(t *testing.T, name string) []sample {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []sample
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out = append(out, sample{l, m.GetCounter().GetValue() + m.GetGauge().GetValue()})
		}
	}
	return out
}

// opsBy reads edgefleet_core_operations_total{op, result} by server.
func (h *harness) opsBy(t *testing.T, op, result string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, s := range h.series(t, "edgefleet_core_operations_total") {
		if s.labels["op"] == op && s.labels["result"] == result {
			out[s.labels["server"]] += int(s.value)
		}
	}
	return out
}

// gauge reads a gauge of the harness's registry for server; -1 when absent.
func (h *harness) gauge(t *testing.T, name, server string) float64 {
	t.Helper()
	for _, s := range h.series(t, name) {
		if s.labels["server"] == server {
			return s.value
		}
	}
	return -1
}

func (h *harness) backend(t *testing.T, name string) core.BackendState {
	t.Helper()
	for _, b := range h.srv.Backends() {
		if b.Name == name {
			return b
		}
	}
	t.Fatalf("no backend %s in %+v", name, h.srv.Backends())
	return core.BackendState{}
}

// within checks that got splits total like want (percent) within ±3 points.
func within(t *testing.T, what string, got map[string]int, total int, want map[string]float64) {
	t.Helper()
	n := 0
	for _, v := range got {
		n += v
	}
	if n != total {
		t.Errorf("%s: %d operations counted, want %d (%v)", what, n, total, got)
	}
	for s, w := range want {
		if share := 100 * float64(got[s]) / float64(total); share < w-3 || share > w+3 {
			t.Errorf("%s: %s took %.1f %%, want %.1f ± 3 (%v)", what, s, share, w, got)
		}
	}
	for s := range got {
		if _, ok := want[s]; !ok {
			t.Errorf("%s: %s took %d, want none (%v)", what, s, got[s], got)
		}
	}
}

// Seed 003, proportional: searches 2:1:1 and binds 1:0:0 over 3,000
// operations each on one client connection, within ±3 points; compare,
// listed by no route, splits equally. Each operation runs as the client's
// identity on whichever server it lands: the core binds each backend
// connection lazily with the saved credentials, so alice reads her own
// userPassword (ACL: self only) and compares it true everywhere. A bind
// as someone else is not carried over to the other servers' connections.
func TestBalanceProportional(t *testing.T) {
	sl := testbed.StartSlapds(t, 3, testbed.SlapdConfig{})
	h := newHarness(t, allBalanced(sl, 3, 60, 3600, "PROP",
		`{"object": "LoadBalancer", "name": "PROP", "algorithm": "proportional", "routes": [
    {"server": "L1", "weight": {"search": 2, "bind": 1}},
    {"server": "L2", "weight": {"search": 1, "bind": 0}},
    {"server": "L3", "weight": {"search": 1, "bind": 0}}]}`), nil)
	const n = 3000
	c := h.dial(t)
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Fatal(err)
	}
	req := ldap.NewSearchRequest(alice, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
		"(objectClass=*)", []string{"userPassword"}, nil)
	for i := range n {
		res, err := c.Search(req)
		if err != nil {
			t.Fatalf("search %d: %v", i, err)
		}
		if len(res.Entries) != 1 || res.Entries[0].GetAttributeValue("userPassword") != "alice-pw" {
			t.Fatalf("search %d: %+v: not run as alice", i, res.Entries)
		}
	}
	for i := range n {
		if err := c.Bind(alice, "alice-pw"); err != nil {
			t.Fatalf("bind %d: %v", i, err)
		}
	}
	for i := range n {
		if ok, err := c.Compare(alice, "userPassword", "alice-pw"); err != nil || !ok {
			t.Fatalf("compare %d: %v %v: not run as alice", i, ok, err)
		}
	}
	// One backend connection per server for the 9,000 operations: binding
	// again as alice leaves the others bound as alice (no re-bind per bind).
	for i, s := range sl {
		if n := h.dialCount(s.Addr); n != 1 {
			t.Errorf("L%d dialed %d times, want once", i+1, n)
		}
	}
	// bob's bind (on L1) ends alice's identity everywhere: L2's
	// connection is not bob's until re-bound, so bob cannot read alice's
	// password there.
	if err := c.Bind(bob, "bob-pw"); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		res, err := c.Search(req)
		if err != nil || len(res.Entries) != 1 || res.Entries[0].GetAttributeValue("userPassword") != "" {
			t.Fatalf("search %d as bob: %+v %v", i, res, err)
		}
	}
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Fatal(err)
	}
	within(t, "searches", h.opsBy(t, "search", "success"), n+4, map[string]float64{"L1": 50, "L2": 25, "L3": 25})
	within(t, "binds", h.opsBy(t, "bind", "success"), n+3, map[string]float64{"L1": 100})
	within(t, "compares", h.opsBy(t, "compare", "compareTrue"), n, map[string]float64{"L1": 100.0 / 3, "L2": 100.0 / 3, "L3": 100.0 / 3})
	for _, b := range h.srv.Backends() {
		if b.InFlight != 0 {
			t.Errorf("%s: %d operations in flight after all were answered", b.Name, b.InFlight)
		}
	}
}

// add writes a new entry under ou=writes through c.
func add(t *testing.T, c *ldap.Conn, name string) {
	t.Helper()
	r := ldap.NewAddRequest("cn="+name+",ou=writes,"+testbed.Suffix, nil)
	r.Attribute("objectClass", []string{"person"})
	r.Attribute("cn", []string{name})
	r.Attribute("sn", []string{name})
	if err := c.Add(r); err != nil {
		t.Fatalf("add %s: %v", name, err)
	}
}

// Seed 003, figure 5-1: adds to server 1, binds to server 2; server 1
// stops → adds go to the next priority; server 1 back (the monitor sees
// it) → without switchback the adds stay on server 2 until it fails in
// turn, with switchback they return at once.
func TestBalanceFailoverByOperationType(t *testing.T) {
	for _, switchback := range []bool{false, true} {
		t.Run(fmt.Sprintf("switchback %v", switchback), func(t *testing.T) {
			sl := testbed.StartSlapds(t, 3, testbed.SlapdConfig{})
			sb := 0
			if switchback {
				sb = 1
			}
			h := newHarness(t, allBalanced(sl, 2, 60, 2, "FO",
				fmt.Sprintf(`{"object": "LoadBalancer", "name": "FO", "algorithm": "failover", "switchback": %d, "routes": [
    {"server": "L1", "priority": {"add": 1, "bind": 2, "default": 1}},
    {"server": "L2", "priority": {"add": 2, "bind": 1, "default": 2}},
    {"server": "L3", "priority": 3}]}`, sb)), nil)
			c := h.dial(t)
			if err := c.Bind(alice, "alice-pw"); err != nil {
				t.Fatal(err)
			}
			add(t, c, "a1")
			sl[0].Stop()
			waitWithin(t, 20*time.Second, "the monitor to see L1 down", func() bool { return h.srv.Health().Offline("L1") })
			add(t, c, "a2")
			if err := c.Bind(alice, "alice-pw"); err != nil {
				t.Fatal(err)
			}
			if err := sl[0].Start(); err != nil {
				t.Fatal(err)
			}
			waitWithin(t, 20*time.Second, "the monitor to see L1 back", func() bool { return !h.srv.Health().Offline("L1") })
			add(t, c, "a3")
			want := []string{"L1", "L2", "L1"}
			if !switchback {
				want = []string{"L1", "L2", "L2"}
				sl[1].Stop()
				waitWithin(t, 20*time.Second, "the monitor to see L2 down", func() bool { return h.srv.Health().Offline("L2") })
				add(t, c, "a4")
				want = append(want, "L1")
			}
			if got := h.targets("add"); !slices.Equal(got, want) {
				t.Errorf("adds went to %v, want %v", got, want)
			}
			if got := h.targets("bind"); !slices.Equal(got, []string{"L2", "L2"}) {
				t.Errorf("binds went to %v, want [L2 L2]", got)
			}
		})
	}
}

// hold sends n searches through c that the frozen server will sit on,
// and returns a func that waits for their answers.
func hold(t *testing.T, c *ldap.Conn, n int) func() {
	t.Helper()
	var rs []ldap.Response
	for range n {
		rs = append(rs, c.SearchAsync(context.Background(), ldap.NewSearchRequest(alice, ldap.ScopeBaseObject,
			ldap.NeverDerefAliases, 0, 0, false, "(objectClass=*)", []string{"cn"}, nil), 1))
	}
	return func() {
		t.Helper()
		for i, r := range rs {
			for r.Next() {
			}
			if err := r.Err(); err != nil {
				t.Errorf("held search %d: %v", i, err)
			}
		}
	}
}

// boundClient binds a new client connection as alice.
func boundClient(t *testing.T, h *harness) *ldap.Conn {
	t.Helper()
	c := h.dial(t)
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Fatal(err)
	}
	return c
}

func whoami(t *testing.T, c *ldap.Conn) {
	t.Helper()
	if _, err := c.WhoAmI(nil); err != nil {
		t.Fatal(err)
	}
}

// Seed 003, saturation: the preferred route takes everything until its
// saturation reaches the threshold (searches held open on a frozen slapd,
// 3 of capacity 4 = 75 % ≥ 50 %), then new operations go to the next
// priority; once the held searches are answered its saturation drops and
// the operations come back. The alert (40 %) is logged and counted once
// per crossing, however many operations pass meanwhile. The monitor is
// off (MonitorInterval one hour, the smoothing's time constant): the test
// moves the core's clock.
func TestBalanceSaturation(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	t.Cleanup(sl[0].Thaw)
	h := newHarness(t, allBalanced(sl, 30, 60, 3600, "SAT",
		`{"object": "LoadBalancer", "name": "SAT", "algorithm": "saturation", "threshold": 50, "alert": 40, "routes": [
    {"server": "L1", "priority": 1, "capacity": 4}, {"server": "L2", "priority": 2, "capacity": 4}]}`), nil)
	a := boundClient(t, h) // on L1: the connection the held searches use
	whoami(t, a)
	alerts := func() int { return len(h.logs.JSONLines("saturation alert")) }
	for round := 1; round <= 2; round++ {
		sl[0].Freeze()
		wait := hold(t, a, 3)
		waitFor(t, "3 searches in flight on L1", func() bool { return h.backend(t, "L1").InFlight == 3 })
		h.clock.Advance(5 * time.Hour)
		if s := h.backend(t, "L1").Saturation; s < 74 || s > 75 {
			t.Fatalf("round %d: L1 saturation %v, want 75", round, s)
		}
		for range 3 {
			b := boundClient(t, h)
			whoami(t, b)
			b.Close()
		}
		sl[0].Thaw()
		wait()
		waitFor(t, "L1 to drain", func() bool { return h.backend(t, "L1").InFlight == 0 })
		h.clock.Advance(5 * time.Hour)
		whoami(t, a)
		if n := alerts(); n != round {
			t.Errorf("round %d: %d alert lines, want %d (once per crossing)", round, n, round)
		}
	}
	if got, want := h.targets("bind"), []string{"L1", "L2", "L2", "L2", "L2", "L2", "L2"}; !slices.Equal(got, want) {
		t.Errorf("binds went to %v, want %v", got, want)
	}
	// whoami: once before, then after each round, on L1; the new clients'
	// on L2 while L1 was saturated.
	if got := h.opsBy(t, "extended", "success"); got["L1"] != 3 || got["L2"] != 6 {
		t.Errorf("whoami by server %v, want L1 3, L2 6", got)
	}
	for _, l := range h.logs.JSONLines("saturation alert") {
		if l["target"] != "L1" || l["balancer"] != "SAT" {
			t.Errorf("alert line %v", l)
		}
	}
	if n := counterValue(t, h, "edgefleet_core_saturation_alerts_total"); n != 2 {
		t.Errorf("edgefleet_core_saturation_alerts_total = %v, want 2", n)
	}
}

// counterValue sums a counter of the harness's registry.
func counterValue(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	sum := 0.0
	for _, s := range h.series(t, name) {
		sum += s.value
	}
	return sum
}

// Seed 003, optimal with the default precision of 5 points: L1, the route
// in use, 3 points more saturated than L2 keeps the traffic (no flapping);
// 7 points more, and new operations go to L2.
func TestBalanceOptimalPrecision(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	t.Cleanup(sl[0].Thaw)
	h := newHarness(t, allBalanced(sl, 30, 60, 3600, "OPT",
		`{"object": "LoadBalancer", "name": "OPT", "algorithm": "optimal", "routes": [
    {"server": "L1", "capacity": 100}, {"server": "L2", "capacity": 100}]}`), nil)
	a := boundClient(t, h)
	whoami(t, a)
	sl[0].Freeze()
	wait := hold(t, a, 3)
	waitFor(t, "3 searches in flight on L1", func() bool { return h.backend(t, "L1").InFlight == 3 })
	h.clock.Advance(5 * time.Hour)
	// 3 % against 0 %: within the precision, a new client's bind goes to
	// L1 too (where it waits, frozen, like the searches).
	b := h.dial(t)
	bound := make(chan error, 1)
	go func() { bound <- b.Bind(alice, "alice-pw") }()
	waitFor(t, "the new bind in flight on L1", func() bool { return h.backend(t, "L1").InFlight == 4 })
	wait2 := hold(t, a, 3)
	waitFor(t, "7 operations in flight on L1", func() bool { return h.backend(t, "L1").InFlight == 7 })
	h.clock.Advance(5 * time.Hour)
	// 7 % against 0 %: past the precision, the next client goes to L2 and
	// is answered while L1 is still frozen.
	c := boundClient(t, h)
	whoami(t, c)
	sl[0].Thaw()
	wait()
	wait2()
	if err := <-bound; err != nil {
		t.Fatalf("bind held on L1: %v", err)
	}
	if got := h.opsBy(t, "bind", "success"); got["L1"] != 2 || got["L2"] != 1 {
		t.Errorf("binds by server %v, want L1 2 (within the precision), L2 1 (past it)", got)
	}
	if got := h.opsBy(t, "extended", "success"); got["L2"] != 1 || got["L1"] != 1 {
		t.Errorf("whoami by server %v, want L1 1, L2 1", got)
	}
}

// Seed 003, figure 5-6: (uid=…) goes to the route that allows uid, (cn=…)
// to the one that allows cn, (&(uid=…)(mail=…)) — mail prohibited on the
// uid route — to the pass-through route; a bind, not a search, by
// priority.
func TestBalanceSearchFilter(t *testing.T) {
	sl := testbed.StartSlapds(t, 3, testbed.SlapdConfig{})
	h := newHarness(t, allBalanced(sl, 3, 60, 3600, "SF",
		`{"object": "LoadBalancer", "name": "SF", "algorithm": "searchfilter", "routes": [
    {"server": "L1", "priority": 1, "allowed": ["uid"], "prohibited": ["mail"]},
    {"server": "L2", "priority": 2, "allowed": ["cn"]},
    {"server": "L3", "priority": 3}]}`), nil)
	c := boundClient(t, h)
	for _, f := range []string{"(uid=alice)", "(cn=bob)", "(&(uid=alice)(mail=*))", "(&(UID=alice)(cn=alice))", "(sn=carol)"} {
		if _, err := c.Search(ldap.NewSearchRequest("ou=people,"+testbed.Suffix, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
			0, 0, false, f, []string{"cn"}, nil)); err != nil {
			t.Fatalf("search %s: %v", f, err)
		}
	}
	if got, want := h.targets("search"), []string{"L1", "L2", "L3", "L1", "L3"}; !slices.Equal(got, want) {
		t.Errorf("searches went to %v, want %v", got, want)
	}
	if got := h.targets("bind"); !slices.Equal(got, []string{"L1"}) {
		t.Errorf("bind went to %v, want [L1]", got)
	}
}

// A balance(LB) OperationRouting rule balances only the operations it
// matches; the connection's user target keeps the rest.
func TestBalanceOperationRouting(t *testing.T) {
	sl := testbed.StartSlapds(t, 3, testbed.SlapdConfig{})
	h := newHarness(t, lbDLP(3, 60, 3600, named(sl),
		`{"object": "LoadBalancer", "name": "READS", "algorithm": "proportional", "routes": [{"server": "L2"}, {"server": "L3"}]}`,
		balanceTo("OperationRouting", "SEARCHES", "(opr.req.typ=search)", "READS"),
		rule("ALL", "(user=*)", []string{"L1"}, ""),
		proxy([]string{"SEARCHES", "ALL"}, nil)), nil)
	c := boundClient(t, h)
	for range 4 {
		if _, err := c.Search(ldap.NewSearchRequest(alice, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
			"(objectClass=*)", []string{"userPassword"}, nil)); err != nil {
			t.Fatal(err)
		}
		whoami(t, c)
	}
	if got := h.targets("search"); !slices.Equal(got, []string{"L2", "L3", "L2", "L3"}) {
		t.Errorf("searches went to %v", got)
	}
	if got := h.targets("extended"); !slices.Equal(got, []string{"L1", "L1", "L1", "L1"}) {
		t.Errorf("whoami went to %v", got)
	}
}

// Every way an operation ends takes it out of its server's in-flight
// count: an answer, an abandon, and the client's going away with
// operations unanswered.
func TestInFlightCounts(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	t.Cleanup(sl[0].Thaw)
	h := newHarness(t, lbDLP(30, 60, 3600, named(sl), proxy(nil, []string{"L1"})), nil)
	c, r := h.rawBind(t, 1)
	defer c.Close()
	c.Write(searchPDU(2, testbed.Suffix))
	for {
		raw, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if _, tag, _ := rawHeader(raw); tag == 0x65 {
			break
		}
	}
	if n := h.backend(t, "L1").InFlight; n != 0 {
		t.Fatalf("%d in flight after the answer", n)
	}
	sl[0].Freeze()
	c.Write(searchPDU(3, testbed.Suffix))
	c.Write(searchPDU(4, testbed.Suffix))
	waitFor(t, "2 searches in flight", func() bool { return h.backend(t, "L1").InFlight == 2 })
	c.Write([]byte{0x30, 0x06, 0x02, 0x01, 0x05, 0x50, 0x01, 0x03}) // abandon 3
	waitFor(t, "the abandoned search out of the count", func() bool { return h.backend(t, "L1").InFlight == 1 })
	c.Close()
	waitFor(t, "the unanswered search out of the count", func() bool { return h.backend(t, "L1").InFlight == 0 })
}

// rawHeader is the message id and protocolOp tag of a short PDU.
func rawHeader(raw []byte) (id int, tag byte, ok bool) {
	if len(raw) < 5 || raw[0] != 0x30 || raw[1]&0x80 != 0 || raw[2] != 0x02 {
		return 0, 0, false
	}
	n := int(raw[3])
	if len(raw) < 5+n {
		return 0, 0, false
	}
	for _, b := range raw[4 : 4+n] {
		id = id<<8 | int(b)
	}
	return id, raw[4+n], true
}

// A paged search through a balancer: the pages follow the server that
// issued the cookie, so the search is never restarted elsewhere, and the
// client gets every entry once.
func TestBalancePagedSearch(t *testing.T) {
	const n = 2000
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(n)})
	h := newHarness(t, allBalanced(sl, 3, 60, 3600, "PROP",
		`{"object": "LoadBalancer", "name": "PROP", "algorithm": "proportional", "routes": [{"server": "L1"}, {"server": "L2"}]}`), nil)
	c := boundClient(t, h)
	res, err := c.SearchWithPaging(ldap.NewSearchRequest("ou=bulk,"+testbed.Suffix, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
		0, 0, false, "(objectClass=*)", []string{"1.1"}, nil), 250)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range res.Entries {
		seen[e.DN] = true
	}
	if len(res.Entries) != n+1 || len(seen) != n+1 {
		t.Errorf("%d entries, %d distinct, want %d", len(res.Entries), len(seen), n+1)
	}
	got := h.targets("search")
	if len(got) < 9 || count(got, got[0]) != len(got) {
		t.Errorf("pages went to %v, want every page on one server", got)
	}
	if l := h.logs.JSONLines("paged search restarted"); len(l) != 0 {
		t.Errorf("%d restarts", len(l))
	}
}
