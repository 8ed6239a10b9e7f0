package dlp_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
)

// newClock is the injected time source of a test.
func newClock() *testbed.Clock { return testbed.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)) }

// world is a DLP file, its router and a set of servers that are up or
// down, with a count of connect attempts per server. connect does what the
// core does with a Selection: try the candidates one after another, mark
// failures OFFLINE, stop at the first success.
type world struct {
	t        *testing.T
	f        *dlp.File
	clock    *testbed.Clock
	health   *dlp.Health
	router   *dlp.Router
	down     map[string]bool
	attempts map[string]int
}

func newWorld(t *testing.T, file string, down ...string) *world {
	t.Helper()
	f, err := dlp.Parse("ldap_proxy.json", []byte(file))
	if err != nil {
		t.Fatalf("parse:\n%v", err)
	}
	w := &world{t: t, f: f, clock: newClock(), down: map[string]bool{}, attempts: map[string]int{}}
	for _, d := range down {
		w.down[d] = true
	}
	w.health = dlp.NewHealth(f.Defaults.OfflineRetryTimeout, w.clock.Now)
	w.router = dlp.NewRouter(f, f.Proxies[0], w.health)
	return w
}

// connect returns the server that took the operation, "" when none did.
func (w *world) connect(sel *dlp.Selection) string {
	for _, s := range sel.Candidates {
		if w.health.Offline(s) { // marked by someone else meanwhile
			continue
		}
		w.attempts[s]++
		if w.down[s] {
			w.health.Fail(s)
			continue
		}
		w.health.Succeed(s)
		return s
	}
	return ""
}

// bind selects for user and connects.
func (w *world) bind(user string) (target string, sel *dlp.Selection) {
	w.t.Helper()
	sel, err := w.router.SelectUser(&dlp.Ctx{User: dlp.NormalizeDN(user), Op: "bind"})
	if err != nil {
		w.t.Fatalf("SelectUser(%q): %v", user, err)
	}
	return w.connect(sel), sel
}

const threeServers = `[
  { "object": "Defaults", "OfflineRetryTimeout": 60 },
  { "object": "LdapServer", "name": "LDAP1", "host": "127.0.0.1", "port": 3891 },
  { "object": "LdapServer", "name": "LDAP2", "host": "127.0.0.1", "port": 3892 },
  { "object": "LdapServer", "name": "LDAP3", "host": "127.0.0.1", "port": 3893 },
  { "object": "LdapProxy", "name": "ldapConfiguration" },
`

// The seed's "General Operation Forwarding Example": user X binds, searches
// and unbinds twice; the primary LDAP3 is down and was never contacted.
// The rule is forwardto(LDAP3,LDAP1): failover goes to LDAP1 (the seed's
// narrative says LDAP2; the rule is right).
func TestSeed000GeneralOperationForwardingExample(t *testing.T) {
	for _, variant := range []struct{ name, lb string }{
		{"as printed, loadbalance 0", `"loadbalance" : 0,`},
		{"as narrated, loadbalance not supplied", ``},
	} {
		t.Run(variant.name, func(t *testing.T) {
			w := newWorld(t, threeServers+`
  {
     "object"      : "ProxyRule",
     "ruleType"    : "UserRouting",
     "name"        : "USERROUTING2",
     "condition"   : "(user=cn=admin,o=pqr)",
     "actions"     : [ "forwardto(LDAP3,LDAP1)" ],
     `+variant.lb+`
     "failover"    : 1
  }
]`, "LDAP3")
			rule := w.f.Rules["USERROUTING2"]
			if rule.LoadBalance || !rule.Failover {
				t.Fatalf("loadbalance=%v failover=%v, want 0 and 1", rule.LoadBalance, rule.Failover)
			}
			// First connection: "LDAP3 has never been contacted, the DLP server
			// assumes that it is available and selects it"; the connect fails,
			// LDAP3 is marked OFFLINE, failover connects the next server.
			target, sel := w.bind("cn=admin,o=pqr")
			if !slices.Equal(sel.Candidates, []string{"LDAP3", "LDAP1"}) || sel.Rule != rule {
				t.Fatalf("first selection = %v (rule %v)", sel.Candidates, sel.Rule)
			}
			if target != "LDAP1" || w.attempts["LDAP3"] != 1 {
				t.Fatalf("first bind went to %q after %d attempts on LDAP3", target, w.attempts["LDAP3"])
			}
			if !w.health.Offline("LDAP3") {
				t.Fatal("LDAP3 not OFFLINE after the failed connect")
			}
			// Search and unbind use the connection's target: no selection.
			// Second connection, a little later: LDAP3 is ignored, not tried.
			w.clock.Advance(5 * time.Second)
			target, sel = w.bind("CN=Admin, O=PQR") // the same DN, written differently
			if !slices.Equal(sel.Candidates, []string{"LDAP1"}) || target != "LDAP1" {
				t.Fatalf("second bind: candidates %v target %q", sel.Candidates, target)
			}
			if w.attempts["LDAP3"] != 1 {
				t.Fatalf("LDAP3 was contacted again (%d attempts)", w.attempts["LDAP3"])
			}
		})
	}
}

// The seed's "Round-Robin Selection and Failover" example: RR and FO on,
// L1, L2, L3 with L3 down, binds spaced beyond OfflineRetryTime. The four
// binds go to L1, L2, L1 (L3 tried, failed, failover to L1), L1.
func TestSeed000RoundRobinAndFailoverExample(t *testing.T) {
	w := newWorld(t, `[
  { "object": "Defaults", "OfflineRetryTimeout": 30 },
  { "object": "LdapServer", "name": "L1", "host": "127.0.0.1" },
  { "object": "LdapServer", "name": "L2", "host": "127.0.0.1", "port": 390 },
  { "object": "LdapServer", "name": "L3", "host": "127.0.0.1", "port": 391 },
  { "object": "LdapProxy", "name": "ldapConfiguration" },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "USER_A", "condition": "(user=cn=A,o=pqr)",
    "actions": ["forwardto(L1,L2,L3)"], "loadbalance": 1, "failover": 1 }
]`, "L3")
	wantStart := []string{"L1", "L2", "L3", "L1"}
	wantTarget := []string{"L1", "L2", "L1", "L1"}
	for i := range wantTarget {
		target, sel := w.bind("cn=A,o=pqr")
		if sel.Candidates[0] != wantStart[i] || target != wantTarget[i] {
			t.Errorf("bind #%d: candidates %v, target %q; want start %s, target %s", i+1, sel.Candidates, target, wantStart[i], wantTarget[i])
		}
		w.clock.Advance(31 * time.Second) // "longer than the OfflineRetryTime"
	}
	if w.attempts["L3"] != 1 {
		t.Errorf("L3 attempts = %d, want 1 (bind #3)", w.attempts["L3"])
	}
}

// Same rule, binds within the retry time: once L3 has failed, the round
// robin still points at it in turn, but an OFFLINE L3 is not selectable and
// is skipped without a connect attempt.
func TestRoundRobinSkipsOfflineWithoutTrying(t *testing.T) {
	w := newWorld(t, threeServers+`
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "ALL", "condition": "(user=*)",
    "actions": ["forwardto(LDAP1,LDAP2,LDAP3)"] }
]`, "LDAP3")
	var got []string
	for range 7 {
		target, _ := w.bind("cn=a,o=pqr")
		got = append(got, target)
		w.clock.Advance(time.Second)
	}
	// RR starts: 1 2 3(fails→1) 1 2 3(OFFLINE→1) 1
	if want := []string{"LDAP1", "LDAP2", "LDAP1", "LDAP1", "LDAP2", "LDAP1", "LDAP1"}; !slices.Equal(got, want) {
		t.Errorf("targets %v, want %v", got, want)
	}
	if w.attempts["LDAP3"] != 1 {
		t.Errorf("LDAP3 attempts = %d, want 1", w.attempts["LDAP3"])
	}
}

// "Even if a server outage was detected by user X, the target server will
// not be selectable for any other user Y after the detection" — whatever
// rule Y's selection comes from.
func TestSeed000OfflineSharedByAllUsersAndRules(t *testing.T) {
	w := newWorld(t, threeServers+`
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "X", "condition": "(user=cn=x,o=pqr)", "actions": ["forwardto(LDAP3,LDAP1)"] },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "Y", "condition": "(user:node=ou=y,o=pqr)", "actions": ["forwardto(LDAP3,LDAP2)"], "loadbalance": 0 }
]`, "LDAP3")
	selY, _ := w.router.SelectUser(&dlp.Ctx{User: "cn=y1,ou=y,o=pqr"})
	if target, _ := w.bind("cn=x,o=pqr"); target != "LDAP1" {
		t.Fatalf("X went to %q", target)
	}
	target, sel := w.bind("cn=y2,ou=y,o=pqr")
	if !slices.Equal(sel.Candidates, []string{"LDAP2"}) || target != "LDAP2" || w.attempts["LDAP3"] != 1 {
		t.Errorf("Y: candidates %v target %q, LDAP3 attempts %d", sel.Candidates, target, w.attempts["LDAP3"])
	}
	// "it does not affect the target servers that are already selected for
	// other user connections that existed at failure time"
	if selY == nil || !slices.Equal(selY.Candidates, []string{"LDAP3", "LDAP2"}) {
		t.Errorf("an earlier selection changed: %v", selY)
	}
}

// OfflineRetryTimeout: "after this amount of time has passed, the server is
// selectable again for a retry for new users", and a failed retry makes it
// OFFLINE again for the whole retry time.
func TestSeed000OfflineRetryTimeout(t *testing.T) {
	w := newWorld(t, threeServers+`
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "X", "condition": "(user=cn=x,o=pqr)", "actions": ["forwardto(LDAP3,LDAP1)"] }
]`, "LDAP3")
	w.bind("cn=x,o=pqr")
	for _, step := range []struct {
		advance   time.Duration
		want      []string
		attempts3 int
	}{
		{59 * time.Second, []string{"LDAP1"}, 1},         // still OFFLINE
		{1 * time.Second, []string{"LDAP3", "LDAP1"}, 2}, // 60 s: selectable, retried, fails again
		{59 * time.Second, []string{"LDAP1"}, 2},         // OFFLINE again from the failed retry
		{1 * time.Second, []string{"LDAP3", "LDAP1"}, 3}, // and selectable after it
		{10 * time.Second, []string{"LDAP1"}, 3},         // failed once more
	} {
		w.clock.Advance(step.advance)
		_, sel := w.bind("cn=x,o=pqr")
		if !slices.Equal(sel.Candidates, step.want) || w.attempts["LDAP3"] != step.attempts3 {
			t.Fatalf("after +%v: candidates %v, LDAP3 attempts %d; want %v, %d", step.advance, sel.Candidates, w.attempts["LDAP3"], step.want, step.attempts3)
		}
	}
	// LDAP3 comes back: the next real retry succeeds and it stays selectable.
	w.down["LDAP3"] = false
	w.clock.Advance(60 * time.Second)
	for range 3 {
		if target, _ := w.bind("cn=x,o=pqr"); target != "LDAP3" {
			t.Fatalf("LDAP3 back up, target %q", target)
		}
		w.clock.Advance(time.Hour)
	}
}

// "there is a difference between selectable and a real retry": a
// non-primary server whose OFFLINE time is over is selectable but not
// contacted while the primary answers, and stays selectable for as long as
// that lasts; only a real attempt that fails makes it OFFLINE again.
func TestSeed000SelectableIsNotARetry(t *testing.T) {
	w := newWorld(t, threeServers+`
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "X", "condition": "(user=*)", "actions": ["forwardto(LDAP1,LDAP2)"], "loadbalance": 0 }
]`, "LDAP2")
	// Some connection found LDAP2 down.
	w.health.Fail("LDAP2")
	w.attempts["LDAP2"]++
	if _, sel := w.bind("cn=a,o=pqr"); !slices.Equal(sel.Candidates, []string{"LDAP1"}) {
		t.Fatalf("within the retry time: %v", sel.Candidates)
	}
	// Long after the retry time LDAP2 is selectable (in the list) yet never
	// contacted, because LDAP1, the primary, takes every bind.
	for _, d := range []time.Duration{61 * time.Second, 10 * time.Minute, 5 * time.Hour} {
		w.clock.Advance(d)
		target, sel := w.bind("cn=a,o=pqr")
		if target != "LDAP1" || !slices.Equal(sel.Candidates, []string{"LDAP1", "LDAP2"}) || w.attempts["LDAP2"] != 1 {
			t.Fatalf("+%v: target %q candidates %v LDAP2 attempts %d", d, target, sel.Candidates, w.attempts["LDAP2"])
		}
		if w.health.Offline("LDAP2") {
			t.Fatalf("+%v: LDAP2 OFFLINE without a retry", d)
		}
	}
	// The primary fails: failover makes the real retry of LDAP2, which
	// fails: both are OFFLINE now, nothing is selectable.
	w.down["LDAP1"] = true
	if target, _ := w.bind("cn=a,o=pqr"); target != "" || w.attempts["LDAP2"] != 2 {
		t.Fatalf("target %q, LDAP2 attempts %d", target, w.attempts["LDAP2"])
	}
	if !w.health.Offline("LDAP2") || !w.health.Offline("LDAP1") {
		t.Fatal("failed retry did not mark OFFLINE")
	}
}

// "if all relevant servers cannot be reached, they will all stay in the
// OFFLINE state for at least OfflineRetryTime and will therefore not be
// selected even if the server is physically up before the
// OfflineRetryTime expires": the candidate list is empty (the core answers
// 52) until then — no server is tried behind the seed's back.
func TestSeed000AllServersOffline(t *testing.T) {
	w := newWorld(t, threeServers+`
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "X", "condition": "(user=*)", "actions": ["forwardto(LDAP1,LDAP2)"] }
]`, "LDAP1", "LDAP2")
	if target, _ := w.bind("cn=a,o=pqr"); target != "" {
		t.Fatalf("target %q with both down", target)
	}
	w.down["LDAP1"], w.down["LDAP2"] = false, false // physically up again
	w.clock.Advance(30 * time.Second)
	target, sel := w.bind("cn=a,o=pqr")
	if target != "" || len(sel.Candidates) != 0 || sel.Candidates == nil || sel.Rule.Name != "X" {
		t.Fatalf("before the retry time: target %q candidates %#v", target, sel.Candidates)
	}
	w.clock.Advance(30 * time.Second)
	if target, _ := w.bind("cn=a,o=pqr"); target == "" {
		t.Fatal("not selectable after the retry time")
	}
}

// failover 0: only the first selectable server; its failure is the
// client's (52).
func TestFailoverOff(t *testing.T) {
	w := newWorld(t, threeServers+`
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "X", "condition": "(user=*)", "actions": ["forwardto(LDAP1,LDAP2,LDAP3)"], "failover": 0 }
]`, "LDAP2")
	var got [][]string
	for range 4 {
		_, sel := w.bind("cn=a,o=pqr")
		got = append(got, sel.Candidates)
	}
	// RR (default 1 for a non-exact rule) starts 1, 2 (fails, no failover), 3 (skips nothing), 1
	want := [][]string{{"LDAP1"}, {"LDAP2"}, {"LDAP3"}, {"LDAP1"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("selections %v, want %v", got, want)
	}
	// Next round: LDAP2 is OFFLINE, so the one selectable server after it is LDAP3.
	if _, sel := w.bind("cn=a,o=pqr"); !slices.Equal(sel.Candidates, []string{"LDAP3"}) {
		t.Errorf("with LDAP2 OFFLINE: %v", sel.Candidates)
	}
}

// The first operation need not be a bind: the anonymous user is assumed.
// Rules apply in LdapProxy.rules order; no match → default; no default →
// an error naming the user.
func TestSelectUserRulesDefaultAndAnonymous(t *testing.T) {
	file := threeServers[:strings.LastIndex(threeServers, `{ "object": "LdapProxy"`)] + `
  { "object": "LdapProxy", "name": "ldapConfiguration", "rules": ["ANON", "STAFF", "ADMIN"], "default": ["LDAP2", "LDAP1"] },
  { "object": "LdapProxy", "name": "strict", "rules": ["ADMIN"] },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "ADMIN", "condition": "(user=cn=admin,o=pqr)", "actions": ["forwardto(LDAP3)"] },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "STAFF", "condition": "(&(user:node=ou=staff,o=pqr)(!(user:regex=^cn=temp)))", "actions": ["forwardto(LDAP1,LDAP2)"], "loadbalance": 0 },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "ANON", "condition": "(user=anonymous)", "actions": ["forwardto(LDAP2)"] }
]`
	w := newWorld(t, file)
	tests := []struct {
		user, op string
		rule     string
		cands    []string
	}{
		{"", "search", "ANON", []string{"LDAP2"}},
		{"", "bind", "ANON", []string{"LDAP2"}},
		{"cn=admin,o=pqr", "bind", "ADMIN", []string{"LDAP3"}},
		{"cn=Jo,ou=Staff,o=PQR", "bind", "STAFF", []string{"LDAP1", "LDAP2"}},
		{"ou=staff,o=pqr", "bind", "STAFF", []string{"LDAP1", "LDAP2"}},
		{"cn=temp1,ou=staff,o=pqr", "bind", "", []string{"LDAP2", "LDAP1"}},
		{"cn=x,o=other", "bind", "", []string{"LDAP2", "LDAP1"}},
		{"cn=a\\,ou=staff,o=pqr", "bind", "", []string{"LDAP2", "LDAP1"}}, // escaped comma: not below ou=staff
	}
	for _, tc := range tests {
		sel, err := w.router.SelectUser(&dlp.Ctx{User: tc.user, Op: tc.op})
		if err != nil {
			t.Fatalf("%q: %v", tc.user, err)
		}
		rule := ""
		if sel.Rule != nil {
			rule = sel.Rule.Name
		}
		if rule != tc.rule || !slices.Equal(sel.Candidates, tc.cands) {
			t.Errorf("%q %s: rule %q candidates %v, want %q %v", tc.user, tc.op, rule, sel.Candidates, tc.rule, tc.cands)
		}
	}
	strict := dlp.NewRouter(w.f, w.f.Proxy("strict"), w.health)
	_, err := strict.SelectUser(&dlp.Ctx{User: "cn=x,o=other"})
	if err == nil || err.Error() != `no rule of LdapProxy "strict" matches user "cn=x,o=other" and it has no default servers` {
		t.Errorf("err = %v", err)
	}
	_, err = strict.SelectUser(&dlp.Ctx{})
	if err == nil || !strings.Contains(err.Error(), `user "anonymous"`) {
		t.Errorf("err = %v", err)
	}
	if w.f.Proxy("nosuch") != nil {
		t.Error("Proxy of an unknown name is not nil (plain mode)")
	}
}

// OperationRouting rules route single operations; UserRouting rules are
// not consulted by SelectOperation and vice versa.
func TestSelectOperation(t *testing.T) {
	w := newWorld(t, threeServers+`
  { "object": "ProxyRule", "ruleType": "OperationRouting", "name": "WRITES", "condition": "(|(opr.req.typ=add)(opr.req.typ=modify)(opr.req.typ=delete)(opr.req.typ=modrdn))", "actions": ["forwardto(LDAP1,LDAP2)"], "keepconn": 1 },
  { "object": "ProxyRule", "ruleType": "OperationRouting", "name": "CONFIG", "condition": "(&(opr.req.typ=search)(search.req.baseObject=CN=Config))", "actions": ["forwardto(LDAP3)"] },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "ALL", "condition": "(user=*)", "actions": ["forwardto(LDAP2)"] }
]`)
	tests := []struct {
		op, base string
		rule     string
	}{
		{"add", "", "WRITES"}, {"modify", "", "WRITES"}, {"delete", "", "WRITES"}, {"modrdn", "", "WRITES"},
		{"search", "cn=config", "CONFIG"}, {"search", " CN = config ", "CONFIG"}, {"search", "o=pqr", ""},
		{"compare", "", ""}, {"bind", "", ""},
	}
	for _, tc := range tests {
		sel, ok := w.router.SelectOperation(&dlp.Ctx{User: "cn=a,o=pqr", Op: tc.op, BaseObject: tc.base})
		if ok != (tc.rule != "") || ok && sel.Rule.Name != tc.rule {
			t.Errorf("%s %q: ok=%v sel=%+v, want rule %q", tc.op, tc.base, ok, sel, tc.rule)
		}
	}
	wr := w.f.Rules["WRITES"]
	if !wr.KeepConn || wr.LoadBalance || !wr.Failover {
		t.Errorf("WRITES keepconn=%v loadbalance=%v failover=%v", wr.KeepConn, wr.LoadBalance, wr.Failover)
	}
	sel, _ := w.router.SelectOperation(&dlp.Ctx{Op: "add"})
	if !slices.Equal(sel.Candidates, []string{"LDAP1", "LDAP2"}) {
		t.Errorf("WRITES candidates %v", sel.Candidates)
	}
}

// The round-robin pointer is per rule, advances once per selection, and is
// safe under concurrent selections.
func TestRoundRobinPointerPerRule(t *testing.T) {
	w := newWorld(t, threeServers+`
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "A", "condition": "(user:node=ou=a,o=pqr)", "actions": ["forwardto(LDAP1,LDAP2,LDAP3)"] },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "B", "condition": "(user:node=ou=b,o=pqr)", "actions": ["forwardto(LDAP1,LDAP2,LDAP3)"] }
]`)
	first := func(user string) string {
		sel, err := w.router.SelectUser(&dlp.Ctx{User: user})
		if err != nil {
			t.Fatal(err)
		}
		return sel.Candidates[0]
	}
	got := []string{first("cn=1,ou=a,o=pqr"), first("cn=1,ou=a,o=pqr"), first("cn=1,ou=b,o=pqr"), first("cn=2,ou=a,o=pqr"), first("cn=2,ou=b,o=pqr")}
	if want := []string{"LDAP1", "LDAP2", "LDAP1", "LDAP3", "LDAP2"}; !slices.Equal(got, want) {
		t.Errorf("starts %v, want %v", got, want)
	}
	// 3000 concurrent selections on A leave the pointer where 3000 serial
	// ones would (3000 % 3 == 0 → back at LDAP1 after the 3 above).
	var wg sync.WaitGroup
	counts := make([]map[string]int, 10)
	for g := range 10 {
		counts[g] = map[string]int{}
		wg.Go(func() {
			for range 300 {
				sel, _ := w.router.SelectUser(&dlp.Ctx{User: "cn=x,ou=a,o=pqr"})
				counts[g][sel.Candidates[0]]++
			}
		})
	}
	wg.Wait()
	total := map[string]int{}
	for _, c := range counts {
		for k, v := range c {
			total[k] += v
		}
	}
	if total["LDAP1"] != 1000 || total["LDAP2"] != 1000 || total["LDAP3"] != 1000 {
		t.Errorf("concurrent split %v", total)
	}
	if first("cn=1,ou=a,o=pqr") != "LDAP1" {
		t.Error("pointer lost an advance under concurrency")
	}
}

func TestHealth(t *testing.T) {
	c := newClock()
	h := dlp.NewHealth(time.Minute, c.Now)
	if h.Offline("S") || !h.LastFailure("S").IsZero() {
		t.Fatal("unknown server OFFLINE")
	}
	h.Fail("S")
	failed := c.Now()
	c.Advance(time.Minute - time.Nanosecond)
	if !h.Offline("S") || !h.LastFailure("S").Equal(failed) {
		t.Fatal("not OFFLINE inside the retry time")
	}
	c.Advance(time.Nanosecond)
	if h.Offline("S") {
		t.Fatal("OFFLINE at the retry time")
	}
	if !h.LastFailure("S").Equal(failed) {
		t.Fatal("last failure forgotten without a success")
	}
	h.Succeed("S")
	if !h.LastFailure("S").IsZero() {
		t.Fatal("success did not clear the failure")
	}
	zero := dlp.NewHealth(0, c.Now)
	zero.Fail("S")
	if zero.Offline("S") {
		t.Fatal("OfflineRetryTimeout 0 still marks OFFLINE")
	}
}
