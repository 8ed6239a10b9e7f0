package core_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/go-ldap/ldap/v3"
)

// A slow answer to a client's operation is never a server fault on its
// own: ConnectTimeout bounds the core's own requests (the root DSE search
// ahead of a fresh connection's first request), not the client's.

var slow = testbed.User("slow")

// slowLDIF is the test directory plus uid=slow,ou=people, whose password
// "slow-pw" is a {CRYPT} SHA-512 hash of 3,000,000 rounds: every bind as
// slow, right or wrong, costs slapd about three seconds of CPU here (more
// on a busy machine), above the tests' ConnectTimeout of one second.
func slowLDIF(t *testing.T) string {
	t.Helper()
	slappasswd, err := testbed.Path("slappasswd")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(slappasswd, "-h", "{CRYPT}", "-c", "$6$rounds=3000000$%.16s", "-s", "slow-pw").Output()
	if err != nil {
		t.Fatalf("slappasswd: %v", err)
	}
	return testbed.DirectoryLDIF(0) + fmt.Sprintf("dn: %s\nobjectClass: inetOrgPerson\nuid: slow\ncn: slow\nsn: slow\nuserPassword: %s\n\n",
		slow, strings.TrimSpace(string(out)))
}

// slowHarness is three slapds with the slow user behind a rule with
// failover over L1, L2, L3 (no round robin), ConnectTimeout 1 s, the
// monitor off.
func slowHarness(t *testing.T) ([]*testbed.Slapd, *harness) {
	sl := testbed.StartSlapds(t, 3, testbed.SlapdConfig{LDIF: slowLDIF(t)})
	h := newHarness(t, dlpFile(1, 60, named(sl),
		rule("ALL", "(user=*)", []string{"L1", "L2", "L3"}, `"loadbalance": 0`), proxy([]string{"ALL"}, nil)),
		func(c *core.Config) { c.Now = time.Now })
	start := time.Now()
	direct := bindDirect(t, sl[0], slow, "slow-pw")
	defer direct.Close()
	t.Logf("a bind as %s costs %v on slapd directly (ConnectTimeout 1s)", slow, time.Since(start))
	return sl, h
}

// noneOffline checks that no server is OFFLINE, none logged so, and that
// nothing was tried beyond L1.
func noneOffline(t *testing.T, h *harness, sl []*testbed.Slapd, but ...string) {
	t.Helper()
	for i, s := range sl {
		name := fmt.Sprintf("L%d", i+1)
		if strings.Contains(strings.Join(but, " "), name) {
			continue
		}
		if h.srv.Health().Offline(name) {
			t.Errorf("%s is OFFLINE after a slow bind", name)
		}
		if i > len(but) {
			if n := h.dialCount(s.Addr); n != 0 {
				t.Errorf("%s dialed %d times: the slow bind was replayed", name, n)
			}
		}
	}
	for _, l := range h.logs.JSONLines("server offline") {
		if !strings.Contains(strings.Join(but, " "), fmt.Sprint(l["target"])) {
			t.Errorf("server offline: %v", l)
		}
	}
}

// A bind whose password hash costs more than ConnectTimeout, wrong then
// right: invalidCredentials, then success, both from L1; no server is
// marked OFFLINE and L2, L3 are never tried (before the fix the wrong
// bind marked L1, L2 and L3 OFFLINE one ConnectTimeout apart and got
// unavailable).
func TestSlowBindBlamesNoServer(t *testing.T) {
	sl, h := slowHarness(t)
	c := h.dial(t)
	err := c.Bind(slow, "wrong")
	if !ldap.IsErrorWithCode(err, ldap.LDAPResultInvalidCredentials) {
		t.Errorf("wrong password: %v, want invalidCredentials", err)
	}
	if err := c.Bind(slow, "slow-pw"); err != nil {
		t.Errorf("right password: %v", err)
	}
	if got := h.targets("bind"); strings.Join(got, ",") != "L1,L1" {
		t.Errorf("binds went to %v, want L1 twice", got)
	}
	noneOffline(t, h, sl)
}

// A session bound as slow whose server dies fails over: the re-bind on
// L2 costs more than ConnectTimeout, yet L2 answered the core's root DSE
// search ahead of it, so it is not marked OFFLINE and the search is
// answered there (before the fix the re-bind timed out, L2 and L3 were
// marked OFFLINE and the search got unavailable).
func TestSlowRebindBlamesNoServer(t *testing.T) {
	sl, h := slowHarness(t)
	c := h.dial(t)
	if err := c.Bind(slow, "slow-pw"); err != nil {
		t.Fatal(err)
	}
	sl[0].Kill()
	res, err := c.Search(ldap.NewSearchRequest(slow, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
		"(objectClass=*)", []string{"uid"}, nil))
	if err != nil {
		t.Fatalf("search after L1 died: %v", err)
	}
	if len(res.Entries) != 1 {
		t.Errorf("%d entries, want 1", len(res.Entries))
	}
	if got := h.targets("search"); strings.Join(got, ",") != "L2" {
		t.Errorf("the search went to %v, want L2", got)
	}
	noneOffline(t, h, sl, "L1")
}

// Eight anonymous clients pipeline large searches and never read, with
// the monitor's interval (and so its checks' bound) at one second:
// slapd's worker threads are busy streaming their results (to the core,
// which reads them at once), so a check can take longer than that — but
// the server is sending all along, so it is busy, not frozen: it is not
// marked down or OFFLINE while they stall, and an innocent client is
// served throughout (before the fix it was down in two of three runs).
// The verdict is read when the last stalled client is cut: after that
// the server is idle, and an idle server that takes longer than a 1 s
// bound to answer (a host short of CPU can make it) is down by design.
func TestStalledReadersBusyServerNotDown(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(3000)})
	h := newHarness(t, lbDLP(3, 60, 1, named(sl),
		rule("ALL", "(user=*)", []string{"L1"}, `"failover": 1`),
		proxy([]string{"ALL"}, nil)), func(c *core.Config) { c.Now = time.Now })
	waitWithin(t, 20*time.Second, "the monitor's first check", func() bool { return h.backend(t, "L1").LastCheck != "" })
	stall(t, h.addr, 8)
	clientsCut(t, h, 8)
	noServerBlamed(t, h, "L1")
	if err := innocent(t, h); err != nil {
		t.Errorf("an innocent client after the stall: %v", err)
	}
}
