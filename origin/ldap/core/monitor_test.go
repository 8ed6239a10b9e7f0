package core_test

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/go-ldap/ldap/v3"
)

// The monitor against a real slapd frozen with SIGSTOP (the kernel still
// accepts its connections): down within two intervals (here two seconds;
// testing/synctest proves the bound in TestMonitorSchedule), new sessions
// and balanced operations avoid it without paying a connect attempt, and
// it is back once a check passes after SIGCONT. (Checks get 2 s, so that
// a busy machine does not fail a live slapd's.)
func TestMonitorFrozenBackend(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	t.Cleanup(sl[0].Thaw)
	h := newHarness(t, lbDLP(2, 60, 2, named(sl),
		`{"object": "LoadBalancer", "name": "READS", "algorithm": "proportional", "routes": [{"server": "L1"}, {"server": "L2"}]}`,
		balanceTo("OperationRouting", "SEARCHES", "(opr.req.typ=search)", "READS"),
		rule("ALL", "(user=*)", []string{"L1", "L2"}, `"loadbalance": 0`),
		proxy([]string{"SEARCHES", "ALL"}, nil)), nil)
	waitWithin(t, 20*time.Second, "a first round of checks", func() bool {
		return h.backend(t, "L1").LastCheck != "" && h.backend(t, "L2").LastCheck != ""
	})
	session := func() {
		t.Helper()
		c := boundClient(t, h)
		for range 4 {
			if _, err := c.Search(ldap.NewSearchRequest(alice, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
				"(objectClass=*)", []string{"cn"}, nil)); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
	}
	sl[0].Freeze()
	frozen := time.Now()
	waitWithin(t, 20*time.Second, "the monitor to mark the frozen L1 down", func() bool { return h.srv.Health().Down("L1") })
	t.Logf("L1 down %v after SIGSTOP (MonitorInterval 2 s)", time.Since(frozen).Round(10*time.Millisecond))
	b := h.backend(t, "L1")
	if b.Up || b.State != "down" || b.Saturation != 100 || !strings.Contains(b.CheckError, "no answer within") {
		t.Errorf("GET /backends L1: %+v", b)
	}
	if up, sat := h.gauge(t, "edgefleet_core_backend_up", "L1"), h.gauge(t, "edgefleet_core_backend_saturation", "L1"); up != 0 || sat != 100 {
		t.Errorf("L1 metrics: up %v saturation %v, want 0 and 100", up, sat)
	}
	if up := h.gauge(t, "edgefleet_core_backend_up", "L2"); up != 1 {
		t.Errorf("L2 up %v", up)
	}
	// The sessions never try L1 (which would cost them ConnectTimeout and
	// log a failover): only the monitor's checks go there.
	tried := func() int { return len(h.logs.JSONLines("failover")) + len(h.logs.JSONLines("server offline")) }
	before := tried()
	session()
	if n := tried() - before; n != 0 {
		t.Errorf("%d failover or offline lines while L1 was down: a session tried it", n)
	}
	sl[0].Thaw()
	waitWithin(t, 20*time.Second, "the monitor to see L1 back", func() bool { return !h.srv.Health().Offline("L1") })
	session()
	if got, want := h.targets("bind"), []string{"L2", "L1"}; !slices.Equal(got, want) {
		t.Errorf("binds went to %v, want %v", got, want)
	}
	got := h.targets("search")
	if len(got) != 8 || !slices.Equal(got[:4], []string{"L2", "L2", "L2", "L2"}) || count(got[4:], "L1") != 2 {
		t.Errorf("searches went to %v, want L2 ×4 while L1 was down, then 2 of 4 on L1", got)
	}
	if n, m := len(h.logs.JSONLines("server down")), len(h.logs.JSONLines("server up")); n != 1 || m != 1 {
		t.Errorf("%d \"server down\" and %d \"server up\" lines, want one each", n, m)
	}
}

func count(l []string, s string) int {
	n := 0
	for _, x := range l {
		if x == s {
			n++
		}
	}
	return n
}

// A frozen slapd as a session's first server
// (TCP connects, nothing answers). The bind is answered by the next
// server after ConnectTimeout, and the frozen one is OFFLINE; an
// anonymous client's first search (behind the core's own root DSE search,
// which a live server answers at once) fails over the same way. The
// monitor is off.
func TestFrozenFirstServer(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	t.Cleanup(sl[0].Thaw)
	h := newHarness(t, lbDLP(1, 60, 3600, named(sl),
		rule("ALL", "(user=*)", []string{"L1", "L2"}, `"loadbalance": 0`),
		proxy([]string{"ALL"}, nil)), nil)
	sl[0].Freeze()
	start := time.Now()
	boundClient(t, h)
	t.Logf("bind answered after %v (ConnectTimeout 1 s)", time.Since(start).Round(10*time.Millisecond))
	if got := h.targets("bind"); !slices.Equal(got, []string{"L2"}) {
		t.Errorf("bind went to %v, want [L2]", got)
	}
	if !h.srv.Health().Offline("L1") {
		t.Error("the frozen L1 is not OFFLINE")
	}
	off := h.logs.JSONLines("server offline")
	if len(off) != 1 || !strings.Contains(fmt.Sprint(off[0]["err"]), "no answer to the core's root DSE search within ConnectTimeout (1s)") {
		t.Errorf("offline lines %v", off)
	}
	h.srv.Health().Succeed("L1") // selectable again, still frozen
	c := h.dial(t)
	res, err := c.Search(ldap.NewSearchRequest("ou=people,"+testbed.Suffix, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
		0, 0, false, "(objectClass=inetOrgPerson)", []string{"uid"}, nil))
	if err != nil || len(res.Entries) != 3 {
		t.Fatalf("anonymous search: %v %v", res, err)
	}
	if got := h.targets("search"); !slices.Equal(got, []string{"L2"}) {
		t.Errorf("search went to %v, want [L2]", got)
	}
	if fo := h.logs.JSONLines("failover"); len(fo) != 2 || fo[1]["from"] != "L1" || fo[1]["op"] != "search" {
		t.Errorf("failover lines %v", fo)
	}
}

// The core's own search ahead of an anonymous client's first operation
// (firstAnswer) may be answered after the client's: the server here sends
// both answers in one write, the client's first, so the core reads the
// swallowed ones from its buffer. The client's answer must still leave at
// once. (slapd answers in this order now and then; this server always
// does.)
func TestFirstAnswerSearchAnsweredLast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testbed.ServeConns(t, ln, func(c net.Conn) {
		r := wire.NewReader(c)
		var ids []int32
		for len(ids) < 2 {
			m, ok := readMessage(r)
			if !ok {
				return
			}
			ids = append(ids, m.ID)
		}
		c.Write(append(wire.Result(ids[1], wire.TagSearchResultDone, 0, "", ""), wire.Result(ids[0], wire.TagSearchResultDone, 0, "", "")...))
		r.Next() // until the core closes
	})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", ln.Addr().String(), false}}, proxy(nil, []string{"L1"})), nil)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(searchPDU(7, testbed.Suffix))
	raw, err := wire.NewReader(c).Next()
	if err != nil {
		t.Fatalf("no answer to the search: %v", err)
	}
	if m, err := wire.Parse(raw); err != nil || m.ID != 7 || m.Op != wire.TagSearchResultDone {
		t.Fatalf("answer %+v %v, want the search's own", m, err)
	}
}
