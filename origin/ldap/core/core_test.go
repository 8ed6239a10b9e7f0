package core_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/go-ldap/ldap/v3"
)

var alice, bob = testbed.User("alice"), testbed.User("bob")

// Seed 000, "General Operation Forwarding Example": user X's rule is
// forwardto(LDAP3,LDAP1) without round robin; LDAP3 is down and was never
// contacted. bind → search → unbind, twice: the first connection pays one
// connect attempt to LDAP3 and fails over to LDAP1 (the seed's rule is
// right, not its narrative's LDAP2); the second skips the OFFLINE LDAP3
// without trying it.
func TestSeedForwardingExample(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	ldap3 := refused(t)
	h := newHarness(t, dlpFile(3, 60,
		[]server{{"LDAP1", sl[0].Addr, false}, {"LDAP2", sl[1].Addr, false}, {"LDAP3", ldap3, false}},
		rule("USERROUTING2", "(user="+alice+")", []string{"LDAP3", "LDAP1"}, `"failover": 1`),
		proxy([]string{"USERROUTING2"}, nil)), nil)

	for i, wantLDAP3Dials := range []int{1, 1} {
		if n := bindSearchUnbind(t, h, alice, "alice-pw"); n != 3 {
			t.Fatalf("round %d: %d entries, want 3", i, n)
		}
		if got := h.dialCount(ldap3); got != wantLDAP3Dials {
			t.Errorf("round %d: LDAP3 dialed %d times, want %d", i, got, wantLDAP3Dials)
		}
	}
	if got := h.dialCount(sl[1].Addr); got != 0 {
		t.Errorf("LDAP2 dialed %d times; it is not in the rule", got)
	}
	waitFor(t, "two unbinds", func() bool { return len(h.targets("unbind")) == 2 })
	for _, op := range []string{"bind", "search", "unbind"} {
		if got := h.targets(op); !slices.Equal(got, []string{"LDAP1", "LDAP1"}) {
			t.Errorf("%s targets = %v, want [LDAP1 LDAP1]", op, got)
		}
	}
	if !h.srv.Health().Offline("LDAP3") {
		t.Error("LDAP3 is not OFFLINE")
	}
	rec := httptest.NewRecorder()
	h.srv.BackendsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/backends", nil))
	var backends []struct {
		Name        string `json:"name"`
		Up          bool   `json:"up"`
		LastFailure string `json:"last_failure"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &backends); err != nil || len(backends) != 3 {
		t.Fatalf("GET /backends: %v %s", err, rec.Body)
	}
	for _, b := range backends {
		if b.Up != (b.Name != "LDAP3") || (b.LastFailure != "") != (b.Name == "LDAP3") {
			t.Errorf("GET /backends: %+v", b)
		}
	}
}

// Seed 000, "Round-Robin Selection and Failover": L1, L2, L3 with RR and
// FO, L3 down, binds spaced beyond OfflineRetryTimeout → L1, L2, L1, L1.
func TestSeedRoundRobinFailover(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	l3 := refused(t)
	h := newHarness(t, dlpFile(3, 60,
		[]server{{"L1", sl[0].Addr, false}, {"L2", sl[1].Addr, false}, {"L3", l3, false}},
		rule("PEOPLE", "(user:node=ou=people,"+testbed.Suffix+")", []string{"L1", "L2", "L3"}, `"loadbalance": 1, "failover": 1`),
		proxy([]string{"PEOPLE"}, nil)), nil)
	for range 4 {
		c := h.dial(t)
		if err := c.Bind(alice, "alice-pw"); err != nil {
			t.Fatal(err)
		}
		c.Unbind()
		h.clock.Advance(61 * time.Second)
	}
	if got, want := h.targets("bind"), []string{"L1", "L2", "L1", "L1"}; !slices.Equal(got, want) {
		t.Errorf("bind targets = %v, want %v", got, want)
	}
	if got := h.dialCount(l3); got != 1 {
		t.Errorf("L3 dialed %d times, want 1 (bind #3)", got)
	}
}

// OFFLINE lasts OfflineRetryTimeout for every connection; then the server
// is selectable again. Selectable is not retried: a server that is not
// first in its list stays selectable without being contacted.
func TestOfflineExpiryAndSelectableNotRetried(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	down := refused(t)
	h := newHarness(t, dlpFile(3, 60,
		[]server{{"L1", sl[0].Addr, false}, {"L2", down, false}, {"L3", sl[1].Addr, false}},
		rule("ALICE", "(user="+alice+")", []string{"L1", "L2"}, ""),
		rule("BOB", "(user="+bob+")", []string{"L2", "L3"}, ""),
		proxy([]string{"ALICE", "BOB"}, nil)), nil)
	bindAs := func(user, pw string) {
		t.Helper()
		c := h.dial(t)
		if err := c.Bind(user, pw); err != nil {
			t.Fatalf("bind %s: %v", user, err)
		}
		c.Unbind()
	}

	bindAs(bob, "bob-pw") // L2 fails → OFFLINE, bob on L3
	if h.dialCount(down) != 1 || !h.srv.Health().Offline("L2") {
		t.Fatalf("L2 dialed %d times, offline=%v", h.dialCount(down), h.srv.Health().Offline("L2"))
	}
	h.clock.Advance(30 * time.Second)
	bindAs(bob, "bob-pw") // still OFFLINE for everyone: not tried
	if got := h.dialCount(down); got != 1 {
		t.Fatalf("L2 tried while OFFLINE (%d dials)", got)
	}
	h.clock.Advance(31 * time.Second) // past the retry time
	if h.srv.Health().Offline("L2") {
		t.Fatal("L2 still OFFLINE after OfflineRetryTimeout")
	}
	bindAs(alice, "alice-pw") // L2 selectable, second in alice's list: not contacted
	bindAs(alice, "alice-pw")
	if got := h.dialCount(down); got != 1 {
		t.Errorf("L2 contacted %d times by alice's binds, want only bob's first", got)
	}
	if h.srv.Health().Offline("L2") {
		t.Error("selectable L2 became OFFLINE without a real retry")
	}
	bindAs(bob, "bob-pw") // a real retry fails: OFFLINE again
	if got := h.dialCount(down); got != 2 || !h.srv.Health().Offline("L2") {
		t.Errorf("after bob's retry: %d dials, offline=%v; want 2, true", got, h.srv.Health().Offline("L2"))
	}
	if got, want := h.targets("bind"), []string{"L3", "L3", "L1", "L1", "L3"}; !slices.Equal(got, want) {
		t.Errorf("bind targets = %v, want %v", got, want)
	}
}

// failover: 0 returns the first failure to the client.
func TestNoFailover(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	down := refused(t)
	h := newHarness(t, dlpFile(3, 60,
		[]server{{"L1", down, false}, {"L2", sl[0].Addr, false}},
		rule("ALICE", "(user="+alice+")", []string{"L1", "L2"}, `"failover": 0`),
		proxy([]string{"ALICE"}, nil)), nil)
	c := h.dial(t)
	err := c.Bind(alice, "alice-pw")
	if !ldap.IsErrorWithCode(err, ldap.LDAPResultUnavailable) {
		t.Fatalf("bind: %v, want unavailable (52)", err)
	}
	if h.dialCount(sl[0].Addr) != 0 {
		t.Error("failover: 0 still tried L2")
	}
}

// No rule matches and the proxy has no default: 52 naming the user.
func TestNoMatchNoDefault(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}},
		rule("ALICE", "(user="+alice+")", []string{"L1"}, ""),
		proxy([]string{"ALICE"}, nil)), nil)
	c := h.dial(t)
	err := c.Bind(bob, "bob-pw")
	var le *ldap.Error
	if !errors.As(err, &le) || le.ResultCode != ldap.LDAPResultUnavailable || !strings.Contains(le.Err.Error(), "bob") {
		t.Fatalf("bind bob: %v, want 52 naming bob", err)
	}
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Fatalf("a later bind re-selects: %v", err)
	}
}

// A black-holed server (SYNs dropped) costs ConnectTimeout, then failover.
func TestConnectTimeoutBoundsBlackHole(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	hole := testbed.BlackHole(t)
	h := newHarness(t, dlpFile(1, 60,
		[]server{{"HOLE", hole, false}, {"L1", sl[0].Addr, false}},
		rule("ALICE", "(user="+alice+")", []string{"HOLE", "L1"}, ""),
		proxy([]string{"ALICE"}, nil)), nil)
	c := h.dial(t)
	start := time.Now()
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < 900*time.Millisecond || took > 10*time.Second {
		t.Errorf("bind took %v; want about the 1 s ConnectTimeout", took)
	}
	if got := h.targets("bind"); !slices.Equal(got, []string{"L1"}) {
		t.Errorf("bind targets %v", got)
	}
}

// The first operation need not be a bind: it selects as anonymous. A
// failed bind leaves the connection anonymous; WhoAmI and compare pass.
func TestAnonymousFirstOperationAndReads(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}, {"L2", sl[1].Addr, false}},
		rule("ANON", "(user=anonymous)", []string{"L2"}, ""),
		rule("ALICE", "(user="+alice+")", []string{"L1"}, ""),
		proxy([]string{"ANON", "ALICE"}, nil)), nil)
	c := h.dial(t)
	res, err := c.Search(ldap.NewSearchRequest(testbed.Suffix, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
		"(objectClass=*)", []string{"dc"}, nil))
	if err != nil || len(res.Entries) != 1 {
		t.Fatalf("anonymous search: %v", err)
	}
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Fatal(err)
	}
	who, err := c.WhoAmI(nil)
	if err != nil || !strings.EqualFold(who.AuthzID, "dn:"+alice) {
		t.Fatalf("whoami: %+v %v", who, err)
	}
	ok, err := c.Compare(alice, "uid", "alice")
	if err != nil || !ok {
		t.Fatalf("compare: %v %v", ok, err)
	}
	if err := c.Bind(alice, "wrong"); !ldap.IsErrorWithCode(err, ldap.LDAPResultInvalidCredentials) {
		t.Fatalf("bad bind: %v", err)
	}
	if got := h.targets("search"); !slices.Equal(got, []string{"L2"}) {
		t.Errorf("search targets %v, want [L2]", got)
	}
	if got := h.targets("extended"); !slices.Equal(got, []string{"L1"}) {
		t.Errorf("whoami targets %v, want [L1]", got)
	}
}

// Real clients from ldap-utils through the core.
func TestLdapUtils(t *testing.T) {
	testbed.Need(t, "ldapsearch", "ldapwhoami")
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), nil)
	out, err := exec.Command("ldapwhoami", "-x", "-H", "ldap://"+h.addr, "-D", alice, "-w", "alice-pw").CombinedOutput()
	if err != nil || !strings.Contains(strings.ToLower(string(out)), "dn:"+alice) {
		t.Fatalf("ldapwhoami: %v\n%s", err, out)
	}
	out, err = exec.Command("ldapsearch", "-x", "-H", "ldap://"+h.addr, "-D", alice, "-w", "alice-pw",
		"-b", "ou=people,"+testbed.Suffix, "-LLL", "(uid=bob)", "cn").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cn: bob") {
		t.Fatalf("ldapsearch: %v\n%s", err, out)
	}
	waitFor(t, "unbind logged", func() bool { return len(h.targets("unbind")) == 2 })
	for _, l := range h.logs.JSONLines("ldap op") {
		for _, k := range []string{"claimed", "measured", "edge", "agent", "user", "op", "target", "result", "duration"} {
			if _, ok := l[k]; !ok {
				t.Errorf("log line without %q: %v", k, l)
			}
		}
	}
}

// Garbage, an oversized PDU before bind and an indefinite length each get
// a Notice of Disconnection (protocolError) and a close.
func TestBadPDUsGetNoticeOfDisconnection(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), nil)
	big := append([]byte{0x30, 0x83, 0x05, 0x00, 0x00}, make([]byte, 64)...) // declares 320 KiB
	for _, tc := range []struct {
		name string
		data []byte
		diag string // in the notice's diagnostic, when set
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ""},
		{"oversized before bind", big, "exceeds 262144"},
		{"indefinite length", []byte{0x30, 0x80, 0x02, 0x01, 0x01, 0x42, 0x00, 0x00, 0x00}, ""},
		{"unknown operation", []byte{0x30, 0x05, 0x02, 0x01, 0x01, 0x5f, 0x00}, ""},
		{"truncated bind", []byte{0x30, 0x06, 0x02, 0x01, 0x01, 0x60, 0x01, 0x02}, ""},
		{"filter nested 65 deep", nestedSearchPDU(2, 65), "nested deeper than 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write(tc.data)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			r := wire.NewReader(c)
			raw, err := r.Next()
			if err != nil {
				t.Fatalf("no notice: %v", err)
			}
			m, err := wire.Parse(raw)
			if err != nil || m.ID != 0 || m.ExtOID != wire.OIDNoticeOfDisconnection || m.ResultCode != wire.ResultProtocolError {
				t.Fatalf("got %+v %v, want a notice of disconnection with protocolError", m, err)
			}
			if !strings.Contains(m.Diagnostic, tc.diag) {
				t.Errorf("diagnostic %q, want it to name %q", m.Diagnostic, tc.diag)
			}
			if _, err := r.Next(); err == nil {
				t.Fatal("connection still open after the notice")
			}
		})
	}
	// 64 levels are allowed: the search reaches the server.
	c64, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c64.Close()
	c64.Write(nestedSearchPDU(2, 64))
	c64.SetReadDeadline(time.Now().Add(5 * time.Second))
	if raw, err := wire.NewReader(c64).Next(); err != nil {
		t.Fatalf("64-deep filter: %v", err)
	} else if m, err := wire.Parse(raw); err != nil || m.ID != 2 {
		t.Fatalf("64-deep filter: got %+v %v, want the server's answer to id 2", m, err)
	}

	// After a successful bind the cap is max_pdu: a 300 KiB modify passes
	// the framer (and reaches the server, which answers it).
	c := h.dial(t)
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Fatal(err)
	}
	mod := ldap.NewModifyRequest(alice, nil)
	mod.Replace("description", []string{strings.Repeat("d", 300<<10)})
	err = c.Modify(mod)
	if err != nil && !ldap.IsErrorWithCode(err, ldap.LDAPResultInsufficientAccessRights) {
		t.Fatalf("300 KiB modify after bind: %v", err)
	}

	// ... and one beyond max_pdu (4 MiB) gets the notice.
	raw, r := h.rawBind(t, 1)
	defer raw.Close()
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	raw.Write([]byte{0x30, 0x84, 0x00, 0x40, 0x00, 0x00, 0x02, 0x01, 0x02}) // 4 MiB of content, 6 bytes of header
	pdu, err := r.Next()
	if err != nil {
		t.Fatalf("no notice for a PDU over max_pdu: %v", err)
	}
	if m, err := wire.Parse(pdu); err != nil || m.ExtOID != wire.OIDNoticeOfDisconnection || !strings.Contains(m.Diagnostic, "exceeds 4194304") {
		t.Fatalf("got %+v %v, want a notice naming the 4 MiB cap", m, err)
	}
}

// Plain mode: proxy_mode 0 forwards every connection unchanged.
func TestPlainMode(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	for _, tc := range []struct {
		name  string
		mode  int
		file  bool
		pname string
	}{
		{"proxy_mode 0", 0, true, "ldapConfiguration"},
		{"no DLP file", 1, false, ""},
		{"no LdapProxy named core.name", 1, true, "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f string
			if tc.file {
				f = dlpFile(3, 60, []server{{"L1", "127.0.0.1:1", false}}, strings.Replace(proxy(nil, []string{"L1"}), "ldapConfiguration", tc.pname, 1))
			}
			h := newPlainHarness(t, f, func(c *core.Config) { c.ProxyMode = tc.mode; c.DefaultServer = sl[0].Addr })
			if !h.srv.Plain() {
				t.Fatal("not plain mode")
			}
			if n := bindSearchUnbind(t, h, alice, "alice-pw"); n != 3 {
				t.Fatalf("%d entries", n)
			}
			waitFor(t, "plain connection logged", func() bool { return len(h.logs.JSONLines("plain connection")) == 1 })
		})
	}
}

func TestProxyMode1RefusesSSLServers(t *testing.T) {
	f := dlpFile(3, 60, []server{{"S1", "127.0.0.1:636", true}}, proxy(nil, []string{"S1"}))
	_, err := coreNew(t, f, 1)
	if err == nil || !strings.Contains(err.Error(), `LdapServer "S1"`) {
		t.Fatalf("New = %v, want an error naming S1", err)
	}
	if _, err := coreNew(t, f, 2); err != nil {
		t.Fatalf("mode 2: %v", err)
	}
}

func ExampleParsePins() {
	pins, _ := core.ParsePins([]byte("# agents\n" + strings.Repeat("ab", 32) + " agent-7\n"))
	fmt.Println(pins[strings.Repeat("ab", 32)])
	// Output: agent-7
}

// A multi-step SASL bind (CRAM-MD5: challenge, then response) stays on
// one backend even when round robin would move the next bind elsewhere.
func TestMultiStepSASLStaysOnOneBackend(t *testing.T) {
	testbed.Need(t, "ldapwhoami")
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}, {"L2", sl[1].Addr, false}},
		rule("ALL", "(user=*)", []string{"L1", "L2"}, `"loadbalance": 1`),
		proxy([]string{"ALL"}, nil)), nil)
	for range 2 {
		out, err := exec.Command("ldapwhoami", "-H", "ldap://"+h.addr, "-Y", "CRAM-MD5", "-U", "alice", "-w", "alice-pw", "-N").CombinedOutput()
		if err != nil || !strings.Contains(strings.ToLower(string(out)), "dn:"+alice) {
			t.Fatalf("ldapwhoami -Y CRAM-MD5: %v\n%s", err, out)
		}
	}
	waitFor(t, "two unbinds", func() bool { return len(h.targets("unbind")) == 2 })
	binds, whoami := h.targets("bind"), h.targets("extended")
	if want := []string{"L1", "L1", "L2", "L2"}; !slices.Equal(binds, want) {
		t.Errorf("bind steps went to %v, want %v", binds, want)
	}
	if want := []string{"L1", "L2"}; !slices.Equal(whoami, want) {
		t.Errorf("whoami went to %v, want %v", whoami, want)
	}
}

// Many clients at once, round robin over two servers: every operation is
// answered correctly and the load is shared (run with -race).
func TestConcurrentClients(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}, {"L2", sl[1].Addr, false}},
		rule("PEOPLE", "(user:node=ou=people,"+testbed.Suffix+")", []string{"L1", "L2"}, ""),
		proxy([]string{"PEOPLE"}, nil)), nil)
	const clients, rounds = 16, 20
	errs := make(chan error, clients)
	for i := range clients {
		go func() {
			errs <- func() error {
				c, err := ldap.DialURL("ldap://" + h.addr)
				if err != nil {
					return err
				}
				defer c.Close()
				user := []string{"alice", "bob", "carol"}[i%3]
				for range rounds {
					if err := c.Bind(testbed.User(user), user+"-pw"); err != nil {
						return err
					}
					res, err := c.Search(ldap.NewSearchRequest("ou=people,"+testbed.Suffix, ldap.ScopeSingleLevel,
						ldap.NeverDerefAliases, 0, 0, false, "(uid="+user+")", []string{"cn"}, nil))
					if err != nil {
						return err
					}
					if len(res.Entries) != 1 || res.Entries[0].GetAttributeValue("cn") != user {
						return fmt.Errorf("search for %s: %d entries", user, len(res.Entries))
					}
				}
				return nil
			}()
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	counts := map[string]int{}
	for _, target := range h.targets("bind") {
		counts[target]++
	}
	if counts["L1"]+counts["L2"] != clients*rounds || counts["L1"] == 0 || counts["L2"] == 0 {
		t.Errorf("binds per server %v, want %d shared by L1 and L2", counts, clients*rounds)
	}
}

// nestedSearchPDU is an anonymous search of the suffix whose filter is
// depth levels deep: (!(!…(objectClass=*)…)).
func nestedSearchPDU(id int32, depth int) []byte {
	long := func(tag byte, v []byte) []byte {
		n := len(v)
		return append([]byte{tag, 0x82, byte(n >> 8), byte(n)}, v...)
	}
	f := append([]byte{0x87, byte(len("objectClass"))}, "objectClass"...)
	for range depth - 1 {
		f = long(0xa2, f)
	}
	body := slices.Concat(long(0x04, []byte(testbed.Suffix)), []byte{0x0a, 0x01, 0x00, 0x0a, 0x01, 0x00, 0x02, 0x01, 0x00,
		0x02, 0x01, 0x00, 0x01, 0x01, 0x00}, f, long(0x30, nil))
	return long(0x30, slices.Concat([]byte{0x02, 0x01, byte(id)}, long(wire.TagSearchRequest, body)))
}

// An exact-DN rule matches every spelling slapd binds as the same DN:
// long attribute names, aliases and numeric OIDs (RFC 4519).
func TestExactDNRuleAttributeAliases(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}, {"L2", sl[1].Addr, false}},
		rule("ADMIN", "(user="+testbed.RootDN+")", []string{"L2"}, ""),
		rule("ALICE", "(user="+alice+")", []string{"L2"}, ""),
		proxy([]string{"ADMIN", "ALICE"}, []string{"L1"})), nil)
	binds := []struct{ dn, pw string }{
		{"commonName=admin,dc=example,dc=com", testbed.RootPW},
		{"2.5.4.3=admin,0.9.2342.19200300.100.1.25=example,domainComponent=com", testbed.RootPW},
		{"userid=alice,organizationalUnitName=people,dc=example,dc=com", "alice-pw"},
		{"0.9.2342.19200300.100.1.1=alice,2.5.4.11=people,dc=example,dc=com", "alice-pw"},
	}
	for _, b := range binds {
		c := h.dial(t)
		if err := c.Bind(b.dn, b.pw); err != nil {
			t.Fatalf("bind %s: %v", b.dn, err)
		}
		c.Unbind()
	}
	waitFor(t, "the bind lines", func() bool { return len(h.targets("bind")) == len(binds) })
	if got := h.targets("bind"); !slices.Equal(got, []string{"L2", "L2", "L2", "L2"}) {
		t.Errorf("bind targets %v, want every alias on L2 by its exact-DN rule", got)
	}
	if n := h.dialCount(sl[0].Addr); n != 0 {
		t.Errorf("the default server L1 was dialed %d times", n)
	}
}
