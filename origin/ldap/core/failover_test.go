package core_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/go-ldap/ldap/v3"
)

// A server killed in the middle of a large search: the client gets the
// complete result, every entry once, from the next server.
func TestSearchFailoverMidStream(t *testing.T) {
	const n = 20000
	sl, h, c := bigSearchFailover(t, n)
	resp := c.SearchAsync(context.Background(), ldap.NewSearchRequest("ou=bulk,"+testbed.Suffix, ldap.ScopeWholeSubtree,
		ldap.NeverDerefAliases, 0, 0, false, "(objectClass=*)", []string{"uid", "description"}, nil), 1)
	seen := map[string]int{}
	for resp.Next() {
		seen[resp.Entry().DN]++
		if len(seen) == 100 {
			sl[0].Kill()
		}
	}
	if err := resp.Err(); err != nil {
		t.Fatalf("search: %v after %d entries", err, len(seen))
	}
	if len(seen) != n+1 {
		t.Errorf("%d distinct entries, want %d", len(seen), n+1)
	}
	for dn, k := range seen {
		if k != 1 {
			t.Errorf("%s received %d times", dn, k)
		}
	}
	fo := h.logs.JSONLines("failover")
	if len(fo) != 1 || fo[0]["from"] != "L1" || fo[0]["target"] != "L2" {
		t.Fatalf("failover lines %v: the kill did not hit the running search", fo)
	}
	if got := h.targets("search"); !slices.Equal(got, []string{"L2"}) {
		t.Errorf("search targets %v", got)
	}
	// The connection stays usable, re-bound as alice on L2.
	who, err := c.WhoAmI(nil)
	if err != nil || !strings.EqualFold(who.AuthzID, "dn:"+alice) {
		t.Fatalf("whoami after failover: %+v %v", who, err)
	}
}

// countEntries counts uid=name under ou=writes on a server, as the rootdn.
func countEntries(t *testing.T, s *testbed.Slapd, name string) int {
	t.Helper()
	n := 0
	onServer(t, s, func(c *ldap.Conn) error {
		res, err := c.Search(ldap.NewSearchRequest("ou=writes,"+testbed.Suffix, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
			0, 0, false, "(uid="+name+")", []string{"1.1"}, nil))
		if err == nil {
			n = len(res.Entries)
		}
		return err
	})
	return n
}

// aliceFailsOver starts two slapds and a core that sends alice to L1,
// failing over to L2, and returns a client bound as alice.
func aliceFailsOver(t *testing.T, cfg testbed.SlapdConfig) ([]*testbed.Slapd, *harness, *ldap.Conn) {
	t.Helper()
	sl := testbed.StartSlapds(t, 2, cfg)
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}, {"L2", sl[1].Addr, false}},
		rule("ALICE", "(user="+alice+")", []string{"L1", "L2"}, ""),
		proxy([]string{"ALICE"}, nil)), nil)
	c := h.dial(t)
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Fatal(err)
	}
	return sl, h, c
}

func addRequest(name string) *ldap.AddRequest {
	a := ldap.NewAddRequest("uid="+name+",ou=writes,"+testbed.Suffix, nil)
	a.Attribute("objectClass", []string{"inetOrgPerson"})
	a.Attribute("uid", []string{name})
	a.Attribute("cn", []string{name})
	a.Attribute("sn", []string{name})
	return a
}

// A write fully sent when its server broke has an unknown outcome: 52,
// never sent twice. A write that could not be sent fails over like a read.
func TestWriteFailover(t *testing.T) {
	sl, h, c := aliceFailsOver(t, testbed.SlapdConfig{})

	// In flight: L1 freezes, the add is sent and waits, L1 dies.
	sl[0].Freeze()
	done := make(chan error, 1)
	go func() { done <- c.Add(addRequest("w1")) }()
	waitRecvQueue(t, sl[0].Addr) // the core forwarded it into L1's socket
	sl[0].Kill()
	err := <-done
	var le *ldap.Error
	if !ldap.IsErrorWithCode(err, ldap.LDAPResultUnavailable) || !strings.Contains(fmt.Sprint(err), "outcome is unknown") {
		t.Fatalf("add in flight: %v (%T %v), want 52 saying the outcome is unknown", err, le, err)
	}

	// Not sent: L1 is down now, the next add goes to L2 after a re-bind.
	if err := c.Add(addRequest("w2")); err != nil {
		t.Fatalf("add after the failure: %v", err)
	}
	if err := sl[0].Start(); err != nil {
		t.Fatal(err)
	}
	if got := countEntries(t, sl[0], "w1") + countEntries(t, sl[1], "w1"); got > 1 {
		t.Errorf("w1 exists %d times", got)
	}
	if got := countEntries(t, sl[1], "w1"); got != 0 {
		t.Errorf("w1 was sent a second time, to L2")
	}
	if got := countEntries(t, sl[1], "w2"); got != 1 {
		t.Errorf("w2 on L2: %d", got)
	}
	if got := h.targets("add"); !slices.Equal(got, []string{"L1", "L2"}) {
		t.Errorf("add targets %v", got)
	}
}

// OperationRouting: writes go to the master while the user's reads stay
// on their replica; with keepconn the connection then stays on the master.
func TestOperationRouting(t *testing.T) {
	for _, tc := range []struct {
		keep          int
		searchTargets []string
	}{
		{0, []string{"REPLICA", "REPLICA"}},
		{1, []string{"REPLICA", "MASTER"}},
	} {
		t.Run(fmt.Sprintf("keepconn %d", tc.keep), func(t *testing.T) {
			sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
			h := newHarness(t, dlpFile(3, 60, []server{{"REPLICA", sl[0].Addr, false}, {"MASTER", sl[1].Addr, false}},
				rule("ALICE", "(user="+alice+")", []string{"REPLICA"}, ""),
				fmt.Sprintf(`{"object": "ProxyRule", "ruleType": "OperationRouting", "name": "WRITES", "condition": "(|(opr.req.typ=add)(opr.req.typ=delete))", "actions": ["forwardto(MASTER)"], "keepconn": %d}`, tc.keep),
				proxy([]string{"ALICE", "WRITES"}, nil)), nil)
			c := h.dial(t)
			if err := c.Bind(alice, "alice-pw"); err != nil {
				t.Fatal(err)
			}
			search := func() {
				if _, err := c.Search(ldap.NewSearchRequest(testbed.Suffix, ldap.ScopeBaseObject, ldap.NeverDerefAliases,
					0, 0, false, "(objectClass=*)", nil, nil)); err != nil {
					t.Fatal(err)
				}
			}
			search()
			if err := c.Add(addRequest("op1")); err != nil {
				t.Fatalf("add as alice on the master (lazy bind): %v", err)
			}
			search()
			if got := h.targets("add"); !slices.Equal(got, []string{"MASTER"}) {
				t.Errorf("add targets %v", got)
			}
			if got := h.targets("search"); !slices.Equal(got, tc.searchTargets) {
				t.Errorf("search targets %v, want %v", got, tc.searchTargets)
			}
			if countEntries(t, sl[1], "op1") != 1 || countEntries(t, sl[0], "op1") != 0 {
				t.Error("the add did not land on the master only")
			}
		})
	}
}

// Unbind reaches every backend the client used; the core closes both
// sides.
func TestUnbindClosesEverything(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"REPLICA", sl[0].Addr, false}, {"MASTER", sl[1].Addr, false}},
		rule("ALICE", "(user="+alice+")", []string{"REPLICA"}, ""),
		`{"object": "ProxyRule", "ruleType": "OperationRouting", "name": "WRITES", "condition": "(opr.req.typ=add)", "actions": ["forwardto(MASTER)"]}`,
		proxy([]string{"ALICE", "WRITES"}, nil)), nil)
	c := h.dial(t)
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(addRequest("u1")); err != nil {
		t.Fatal(err)
	}
	c.Unbind()
	waitFor(t, "unbind", func() bool { return len(h.targets("unbind")) == 1 })
	if got := h.targets("unbind")[0]; got != "REPLICA,MASTER" && got != "MASTER,REPLICA" {
		t.Errorf("unbind sent to %q, want both", got)
	}
}

// Abandon goes to the backend holding the operation; message ids pass
// through; the connection goes on.
func TestAbandon(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(3000)})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}, {"L2", sl[1].Addr, false}},
		rule("ALICE", "(user="+alice+")", []string{"L2"}, ""),
		proxy([]string{"ALICE"}, []string{"L1"})), nil)
	c, rd := h.rawBind(t, 7)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// L2 is frozen while the search is sent and abandoned, so that the
	// search is still in flight when the core handles the abandon (the core
	// handles a client's PDUs in order; a running slapd might finish 3,000
	// entries first).
	sl[1].Freeze()
	t.Cleanup(sl[1].Kill)
	c.Write(searchPDU(8, "ou=bulk,"+testbed.Suffix))
	c.Write([]byte{0x30, 0x06, 0x02, 0x01, 0x09, 0x50, 0x01, 0x08}) // abandon 8
	waitFor(t, "the abandon to be logged", func() bool { return len(h.targets("abandon")) == 1 })
	sl[1].Thaw()
	c.Write(searchPDU(10, alice))
	for {
		raw, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		m, _ := wire.Parse(raw)
		if m.ID == 10 && m.Op == wire.TagSearchResultDone {
			if m.ResultCode != 0 {
				t.Fatalf("search after abandon: %s", wire.ResultName(m.ResultCode))
			}
			break
		}
		if m.ID != 8 && m.ID != 10 {
			t.Fatalf("answer with message id %d", m.ID)
		}
	}
	if got := h.targets("abandon"); !slices.Equal(got, []string{"L2"}) {
		t.Errorf("abandon went to %v, want [L2]", got)
	}
}

// searchPDU is a subtree search for (objectClass=*) under base, no
// attributes.
func searchPDU(id int32, base string) []byte { return searchAttrsPDU(id, base, "1.1") }

// searchAttrsPDU is a subtree search for (objectClass=*) under base asking
// for attr.
func searchAttrsPDU(id int32, base, attr string) []byte {
	tlv := func(tag byte, v []byte) []byte {
		n := len(v)
		if n < 0x80 {
			return append([]byte{tag, byte(n)}, v...)
		}
		return append([]byte{tag, 0x82, byte(n >> 8), byte(n)}, v...)
	}
	cat := func(parts ...[]byte) []byte { return slices.Concat(parts...) }
	body := cat(tlv(0x04, []byte(base)), tlv(0x0a, []byte{2}), tlv(0x0a, []byte{0}), tlv(0x02, []byte{0}),
		tlv(0x02, []byte{0}), tlv(0x01, []byte{0}), tlv(0x87, []byte("objectClass")), tlv(0x30, tlv(0x04, []byte(attr))))
	return tlv(0x30, cat(tlv(0x02, msgID(id)), tlv(0x63, body)))
}

// msgID is the content octets of message id as a BER INTEGER.
func msgID(id int32) []byte {
	b := []byte{byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}
	for len(b) > 1 && b[0] == 0 && b[1]&0x80 == 0 {
		b = b[1:]
	}
	return b
}

// waitRecvQueue waits until an established connection to the server at
// addr has unread bytes on the server's side (/proc/net/tcp), i.e. a
// request was sent to a frozen server.
func waitRecvQueue(t *testing.T, addr string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	local := fmt.Sprintf("0100007F:%04X", p)
	waitFor(t, "a request in the server's receive queue", func() bool {
		data, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && f[1] == local && f[3] == "01" { // ESTABLISHED
				if _, rx, ok := strings.Cut(f[4], ":"); ok && strings.TrimLeft(rx, "0") != "" {
					return true
				}
			}
		}
		return false
	})
}

// A server that goes away while the client is idle: nothing is in flight,
// so nothing is lost; the next operation finds the server down (a real
// connect attempt), marks it OFFLINE and moves on after a re-bind. (If the
// request reaches the dead connection before the core has read its end,
// the read is replayed instead: either way the client does not notice.)
func TestIdleBackendLost(t *testing.T) {
	sl, h, c := aliceFailsOver(t, testbed.SlapdConfig{})
	sl[0].Stop()
	who, err := c.WhoAmI(nil)
	if err != nil || !strings.EqualFold(who.AuthzID, "dn:"+alice) {
		t.Fatalf("whoami after L1 went away: %+v %v", who, err)
	}
	if got := h.targets("extended"); !slices.Equal(got, []string{"L2"}) {
		t.Errorf("whoami went to %v", got)
	}
	if n := h.dialCount(sl[0].Addr); n < 1 || n > 2 || !h.srv.Health().Offline("L1") {
		t.Errorf("L1: %d dials, offline %v; want at most one retry, then OFFLINE",
			h.dialCount(sl[0].Addr), h.srv.Health().Offline("L1"))
	}
}

// Failing over to a server that accepts TCP but never answers: the core's
// re-bind there is bounded by ConnectTimeout, then the next server serves.
func TestFailoverPastHungServer(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	hung := testbed.Silent(t)
	h := newHarness(t, dlpFile(1, 60, []server{{"L1", sl[0].Addr, false}, {"HUNG", hung, false}, {"L2", sl[1].Addr, false}},
		rule("ALICE", "(user="+alice+")", []string{"L1", "HUNG", "L2"}, ""),
		proxy([]string{"ALICE"}, nil)), nil)
	c := h.dial(t)
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Fatal(err)
	}
	sl[0].Stop()
	start := time.Now()
	who, err := c.WhoAmI(nil)
	if err != nil || !strings.EqualFold(who.AuthzID, "dn:"+alice) {
		t.Fatalf("whoami: %+v %v", who, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("failover took %v; ConnectTimeout is 1 s", took)
	}
	if got := h.targets("extended"); !slices.Equal(got, []string{"L2"}) {
		t.Errorf("whoami went to %v", got)
	}
	if !h.srv.Health().Offline("HUNG") {
		t.Error("the hung server is not OFFLINE")
	}
}

// A paged search whose server dies between pages, and one whose server
// dies with a page in flight: the client pages on through another
// server (the core restarts the search there and skips what the client
// has) and gets every entry exactly once.
func TestPagedSearchFailover(t *testing.T) {
	const n = 3000
	for _, tc := range []struct {
		name string
		kill func(s *testbed.Slapd) // run after page 2 was received
	}{
		{"between pages", func(s *testbed.Slapd) { s.Stop() }},
		{"with a page in flight", func(s *testbed.Slapd) { s.Freeze() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sl, h, c := aliceFailsOver(t, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(n)})
			paging := ldap.NewControlPaging(500)
			req := ldap.NewSearchRequest("ou=bulk,"+testbed.Suffix, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
				0, 0, false, "(objectClass=*)", []string{"1.1"}, []ldap.Control{paging})
			seen := map[string]int{}
			frozen := false
			for page := 1; ; page++ {
				if page == 3 {
					tc.kill(sl[0])
					frozen = tc.name == "with a page in flight"
				}
				var res *ldap.SearchResult
				var err error
				if frozen {
					// The page request is sent to the frozen L1; once it is
					// there, L1 dies with the page in flight.
					done := make(chan struct{})
					go func() { res, err = c.Search(req); close(done) }()
					waitRecvQueue(t, sl[0].Addr)
					sl[0].Kill()
					<-done
					frozen = false
				} else {
					res, err = c.Search(req)
				}
				if err != nil {
					t.Fatalf("page %d: %v", page, err)
				}
				for _, e := range res.Entries {
					seen[e.DN]++
				}
				pc, _ := ldap.FindControl(res.Controls, ldap.ControlTypePaging).(*ldap.ControlPaging)
				if pc == nil || len(pc.Cookie) == 0 {
					break
				}
				paging.SetCookie(pc.Cookie)
			}
			if len(seen) != n+1 {
				t.Errorf("%d distinct entries, want %d", len(seen), n+1)
			}
			for dn, k := range seen {
				if k != 1 {
					t.Fatalf("%s received %d times", dn, k)
				}
			}
			if len(h.logs.JSONLines("paged search restarted")) == 0 {
				t.Error("no paged search was restarted")
			}
		})
	}
}

// Failover wraps (seed 000: it goes on until the request can be processed
// or all servers fail): with forwardto(L1,L2), a session moved to L2 goes
// back to L1 once L1 has recovered and is selectable, when L2 dies — with
// a read in flight (replayed), idle (the next read), or before a write was
// sent (sent to L1).
func TestFailoverWraps(t *testing.T) {
	for _, tc := range []string{"read in flight", "idle read", "unsent write"} {
		t.Run(tc, func(t *testing.T) {
			sl, h, c := aliceFailsOver(t, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(500)})
			sl[0].Stop()
			if _, err := c.WhoAmI(nil); err != nil {
				t.Fatalf("whoami with L1 down: %v", err)
			}
			if err := sl[0].Start(); err != nil {
				t.Fatal(err)
			}
			h.clock.Advance(61 * time.Second) // L1 is selectable again
			switch tc {
			case "read in flight":
				sl[1].Freeze()
				done := make(chan error, 1)
				go func() {
					res, err := c.Search(ldap.NewSearchRequest("ou=bulk,"+testbed.Suffix, ldap.ScopeWholeSubtree,
						ldap.NeverDerefAliases, 0, 0, false, "(objectClass=*)", []string{"1.1"}, nil))
					if err == nil && len(res.Entries) != 501 {
						err = fmt.Errorf("%d entries, want 501", len(res.Entries))
					}
					done <- err
				}()
				waitRecvQueue(t, sl[1].Addr)
				sl[1].Kill()
				if err := <-done; err != nil {
					t.Fatalf("search in flight when L2 died: %v", err)
				}
				if got := h.targets("search"); !slices.Equal(got, []string{"L1"}) {
					t.Errorf("search targets %v, want [L1]", got)
				}
			case "idle read":
				sl[1].Stop()
				who, err := c.WhoAmI(nil)
				if err != nil || !strings.EqualFold(who.AuthzID, "dn:"+alice) {
					t.Fatalf("whoami after L2 went away: %+v %v", who, err)
				}
				if got := h.targets("extended"); !slices.Equal(got, []string{"L2", "L1"}) {
					t.Errorf("whoami targets %v, want [L2 L1]", got)
				}
			case "unsent write":
				sl[1].Stop()
				if err := c.Add(addRequest("wrap1")); err != nil {
					t.Fatalf("add after L2 went away: %v", err)
				}
				if n := countEntries(t, sl[0], "wrap1"); n != 1 {
					t.Errorf("wrap1 on L1: %d", n)
				}
			}
			if !h.srv.Health().Offline("L2") {
				t.Error("L2 is not OFFLINE")
			}
		})
	}
}

// Every server failing for one request ends the walk: each is tried once,
// then 52.
func TestFailoverWrapEnds(t *testing.T) {
	sl, h, c := aliceFailsOver(t, testbed.SlapdConfig{})
	sl[0].Stop()
	if _, err := c.WhoAmI(nil); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(61 * time.Second) // L1 selectable, but still down
	sl[1].Stop()
	dials := h.dialCount(sl[0].Addr)
	if _, err := c.WhoAmI(nil); !ldap.IsErrorWithCode(err, ldap.LDAPResultUnavailable) {
		t.Fatalf("whoami with both down: %v, want 52", err)
	}
	if n := h.dialCount(sl[0].Addr) - dials; n != 1 {
		t.Errorf("L1 dialed %d times for one request, want 1", n)
	}
}
