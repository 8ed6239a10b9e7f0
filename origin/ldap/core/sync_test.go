package core_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/go-ldap/ldap/v3"
)

// syncDeadline bounds the waits for a syncrepl consumer: a hang guard, far
// above what replication through the core takes.
const syncDeadline = 60 * time.Second

// hasValue reports whether the entry dn on s exists and, when value is
// not empty, has it as its description. A server not answering (yet)
// counts as not having it.
func hasValue(s *testbed.Slapd, dn, value string) bool {
	c, err := ldap.DialURL(s.URL)
	if err != nil {
		return false
	}
	defer c.Close()
	res, err := c.Search(ldap.NewSearchRequest(dn, ldap.ScopeBaseObject, ldap.NeverDerefAliases,
		0, 0, false, "(objectClass=*)", []string{"description"}, nil))
	if err != nil || len(res.Entries) != 1 {
		return false
	}
	return value == "" || res.Entries[0].GetAttributeValue("description") == value
}

// absent reports whether s answers that dn does not exist.
func absent(s *testbed.Slapd, dn string) bool {
	c, err := ldap.DialURL(s.URL)
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Search(ldap.NewSearchRequest(dn, ldap.ScopeBaseObject, ldap.NeverDerefAliases,
		0, 0, false, "(objectClass=*)", []string{"1.1"}, nil))
	return ldap.IsErrorWithCode(err, ldap.LDAPResultNoSuchObject)
}

func bulkDN(i int) string { return fmt.Sprintf("uid=user%05d,ou=bulk,%s", i, testbed.Suffix) }

func writeDN(name string) string { return "uid=" + name + ",ou=writes," + testbed.Suffix }

// A syncrepl consumer (slapd, refreshAndPersist) replicating through the
// core from L1, which dies in the persist phase: the core ends the sync
// search with e-syncRefreshRequired instead of replaying it on L2, the
// consumer syncs again through the core, now from L2, and ends up with
// every change made there, adds and a delete. (A replay would repeat the
// refreshDone, on which slapd's consumer ends the session of its own
// accord; one that does not loses the changes: TestSyncSearchEndsOnFailover.)
func TestSyncreplConsumerFailover(t *testing.T) {
	const n = 20
	sl, h := twoServers(t, testbed.SlapdConfig{LDIF: testbed.ReplicaLDIF(testbed.DirectoryLDIF(n)), SyncProv: true}, nil)
	consumer := testbed.StartSlapds(t, 1, testbed.SlapdConfig{Consumer: "ldap://" + h.addr})[0]
	waitWithin(t, syncDeadline, "the consumer's refresh from L1", func() bool { return hasValue(consumer, bulkDN(n-1), "") })

	// Persist phase: three modifications, made on both replicas as
	// replication would, reach the consumer from L1.
	for i := range 3 {
		for _, s := range sl {
			onServer(t, s, func(c *ldap.Conn) error {
				m := ldap.NewModifyRequest(bulkDN(i), nil)
				m.Replace("description", []string{fmt.Sprintf("changed %d", i)})
				return c.Modify(m)
			})
		}
	}
	waitWithin(t, syncDeadline, "the consumer's persist phase from L1", func() bool { return hasValue(consumer, bulkDN(2), "changed 2") })

	sl[0].Kill()
	for _, name := range []string{"d", "e", "f"} {
		onServer(t, sl[1], func(c *ldap.Conn) error { return c.Add(addRequest(name)) })
	}
	onServer(t, sl[1], func(c *ldap.Conn) error { return c.Del(ldap.NewDelRequest(bulkDN(n-1), nil)) })
	for _, name := range []string{"d", "e", "f"} {
		waitWithin(t, syncDeadline, "the consumer to get "+name+" from L2", func() bool { return hasValue(consumer, writeDN(name), "") })
	}
	waitWithin(t, syncDeadline, "the consumer to get the delete from L2", func() bool { return absent(consumer, bulkDN(n-1)) })
	for i := range 3 {
		if !hasValue(consumer, bulkDN(i), fmt.Sprintf("changed %d", i)) {
			t.Errorf("the consumer lost the modification of %s", bulkDN(i))
		}
	}

	if !syncEndedOnL1(h) {
		t.Error("no sync search on L1 ended with e-syncRefreshRequired")
	}
	for _, l := range h.logs.JSONLines("failover") {
		if l["op"] == "search" {
			t.Errorf("a sync search was replayed: %v", l)
		}
	}
}

// syncEvents reads a sync search until stop (given the sync info
// messages so far) says so or the search ends: the entries (DN to
// description) go into entries; it returns how many intermediate sync
// info messages (refreshDone) arrived. The search's error is resp.Err().
func syncEvents(resp ldap.Response, entries map[string]string, stop func(infos int) bool) (infos int) {
	for !stop(infos) && resp.Next() {
		if e := resp.Entry(); e != nil {
			entries[e.DN] = e.GetAttributeValue("description")
			continue
		}
		if ldap.FindControl(resp.Controls(), ldap.ControlTypeSyncInfo) != nil {
			infos++
		}
	}
	return infos
}

// A consumer that follows the protocol to the letter (go-ldap's Syncrepl,
// refreshAndPersist): its server dies in the persist phase and changes
// are made on the next one. The core ends the search with
// e-syncRefreshRequired (a replay on L2 sends a second refreshDone and
// then drops the adds made there, as many entries being skipped as had
// been forwarded); the consumer refreshes through the core and gets them.
func TestSyncSearchEndsOnFailover(t *testing.T) {
	const n = 20
	sl, h := twoServers(t, testbed.SlapdConfig{LDIF: testbed.ReplicaLDIF(testbed.DirectoryLDIF(n)), SyncProv: true}, nil)
	c := h.dial(t)
	if err := c.Bind(testbed.RootDN, testbed.RootPW); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), syncDeadline) // a hang guard
	defer cancel()
	syncReq := func() *ldap.SearchRequest {
		return ldap.NewSearchRequest(testbed.Suffix, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
			0, 0, false, "(objectClass=*)", []string{"description"}, nil)
	}
	resp := c.Syncrepl(ctx, syncReq(), 64, ldap.SyncRequestModeRefreshAndPersist, nil, false)
	entries := map[string]string{}
	refreshed := func(infos int) bool { return infos == 1 }
	infos := syncEvents(resp, entries, refreshed)
	if infos != 1 {
		t.Fatalf("no refreshDone from L1: %v, %d entries", resp.Err(), len(entries))
	}
	for i := range 3 { // on both replicas, as replication would
		for _, s := range sl {
			onServer(t, s, func(c *ldap.Conn) error {
				m := ldap.NewModifyRequest(bulkDN(i), nil)
				m.Replace("description", []string{fmt.Sprintf("changed %d", i)})
				return c.Modify(m)
			})
		}
	}
	infos += syncEvents(resp, entries, func(int) bool { return entries[bulkDN(2)] == "changed 2" })

	sl[0].Kill()
	for _, name := range []string{"d", "e", "f"} {
		onServer(t, sl[1], func(c *ldap.Conn) error { return c.Add(addRequest(name)) })
	}
	got := func(int) bool { _, ok := entries[writeDN("f")]; return ok }
	infos += syncEvents(resp, entries, got)
	if !ldap.IsErrorWithCode(resp.Err(), wire.ResultSyncRefreshRequired) {
		t.Fatalf("after L1 died: %d refreshDone in all, f received %v, search error %v; want e-syncRefreshRequired",
			infos, got(0), resp.Err())
	}
	if infos != 1 {
		t.Errorf("%d refreshDone messages in one search", infos)
	}

	// The refresh the result asks for, through the core (now to L2).
	entries = map[string]string{}
	resp = c.Syncrepl(ctx, syncReq(), 64, ldap.SyncRequestModeRefreshAndPersist, nil, false)
	if syncEvents(resp, entries, refreshed) != 1 {
		t.Fatalf("no refreshDone from L2: %v", resp.Err())
	}
	for _, name := range []string{"d", "e", "f"} {
		if _, ok := entries[writeDN(name)]; !ok {
			t.Errorf("the refresh from L2 lacks %s", writeDN(name))
		}
	}
	for i := range 3 {
		if v := entries[bulkDN(i)]; v != fmt.Sprintf("changed %d", i) {
			t.Errorf("%s: description %q after the refresh", bulkDN(i), v)
		}
	}
	if !syncEndedOnL1(h) {
		t.Error("no sync search on L1 ended with e-syncRefreshRequired")
	}
}

// syncEndedOnL1 reports whether the core logged a search on L1 ended with
// e-syncRefreshRequired.
func syncEndedOnL1(h *harness) bool {
	for _, l := range h.logs.JSONLines("ldap op") {
		if l["op"] == "search" && l["target"] == "L1" && l["result"] == "e-syncRefreshRequired" {
			return true
		}
	}
	return false
}

// A persistent search whose server dies is not replayed either: it ends
// with unavailable (52), and the client searches again. slapd does not
// implement the persistent search, so the control goes non-critical and
// slapd runs a large plain search, killed while it streams; the core
// still treats it as the client asked.
func TestPersistentSearchEndsOnFailover(t *testing.T) {
	const n = 20000
	sl, h, c := bigSearchFailover(t, n)
	// changeTypes: all, changesOnly false, returnECs false.
	psearch := ldap.NewControlString(wire.OIDPersistentSearch, false, string([]byte{0x30, 0x09, 0x02, 0x01, 0x0f, 0x01, 0x01, 0x00, 0x01, 0x01, 0x00}))
	resp := c.SearchAsync(context.Background(), ldap.NewSearchRequest("ou=bulk,"+testbed.Suffix, ldap.ScopeWholeSubtree,
		ldap.NeverDerefAliases, 0, 0, false, "(objectClass=*)", []string{"uid", "description"}, []ldap.Control{psearch}), 1)
	got := 0
	for resp.Next() {
		if got++; got == 100 {
			sl[0].Kill()
		}
	}
	if !ldap.IsErrorWithCode(resp.Err(), wire.ResultUnavailable) {
		t.Fatalf("search after %d of %d entries: %v, want unavailable", got, n+1, resp.Err())
	}
	if got > n {
		t.Fatalf("all %d entries arrived: the kill did not hit the running search", got)
	}
	if fo := h.logs.JSONLines("failover"); len(fo) != 0 {
		t.Errorf("the persistent search was replayed: %v", fo)
	}
}
