package core_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/go-ldap/ldap/v3"
)

// stall opens n anonymous connections with a 4 KiB receive buffer, each
// sending 9 subtree searches of ou=bulk for every attribute (9.8 MB of
// answers, more than MaxQueued beyond what the core's socket buffer
// absorbs), and never reads them. Four of them have more searches in
// flight than slapd has worker threads, so a core that stopped reading
// their servers would block every thread; the core reads on and holds
// what they do not read for a StallWindow, which makes slapd serve all
// of it: more searches would measure slapd's speed on a shared machine.
func stall(t *testing.T, addr string, n int) {
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.(*net.TCPConn).SetReadBuffer(4096)
		for i := int32(1); i <= 9; i++ {
			if _, err := c.Write(searchAttrsPDU(i, "ou=bulk,"+testbed.Suffix, "*")); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// innocent is one read of another client, on a connection of its own.
func innocent(t *testing.T, h *harness) error {
	c, err := ldap.DialURL("ldap://" + h.addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetTimeout(10 * time.Second)
	res, err := c.Search(ldap.NewSearchRequest(alice, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
		"(objectClass=*)", []string{"cn"}, nil))
	if err == nil && len(res.Entries) != 1 {
		err = errors.New("not one entry")
	}
	return err
}

// clientsCut waits until n clients were disconnected for not reading,
// serving an innocent client all along, and checks that no server was
// marked down or OFFLINE for it.
func clientsCut(t *testing.T, h *harness, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for served := 0; served < 3 || len(h.logs.JSONLines("client stopped reading: disconnected")) < n; served++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d stalled clients disconnected within 60s", len(h.logs.JSONLines("client stopped reading: disconnected")), n)
		}
		if err := innocent(t, h); err != nil {
			t.Errorf("an innocent client's search while others stalled: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, l := range h.logs.JSONLines("client stopped reading: disconnected") {
		if !strings.Contains(fmt.Sprint(l["err"]), "bytes queued for the client") {
			t.Errorf("disconnected for %v, want the queue bound", l["err"])
		}
	}
}

// noServerBlamed checks that every server stayed up (monitor and
// first-answer bound alike) while clients stalled.
func noServerBlamed(t *testing.T, h *harness, servers ...string) {
	t.Helper()
	for _, name := range servers {
		if b := h.backend(t, name); b.State != "up" {
			t.Errorf("%s is %s (%s) after clients stalled: a client's doing counted against it", name, b.State, b.CheckError)
		}
	}
	for _, msg := range []string{"server offline", "server down"} {
		if n := len(h.logs.JSONLines(msg)); n > 0 {
			t.Errorf("%d %q lines after clients stalled", n, msg)
		}
	}
}

// stallDLP is the stall tests' DLP file: every user to the balancer
// name, defined by lb, over sl. The monitor checks every 10 s; its checks
// and every first answer are bounded by 10 s, a hang guard, not a speed
// limit: a slapd busy with the stalled clients' searches on a loaded host
// answers slowly, and only one that does not answer at all is at fault.
func stallDLP(sl []*testbed.Slapd, name, lb string) string {
	return allBalanced(sl, 10, 60, 10, name, lb)
}

// nextChecks waits (a hang guard: three intervals) until the monitor has
// checked each server again since it was called.
func nextChecks(t *testing.T, h *harness, servers ...string) {
	t.Helper()
	last := map[string]string{}
	for _, name := range servers {
		last[name] = h.backend(t, name).LastCheck
	}
	waitWithin(t, 30*time.Second, "the monitor's next round", func() bool {
		for _, name := range servers {
			if h.backend(t, name).LastCheck == last[name] {
				return false
			}
		}
		return true
	})
}

// Clients that send many large searches and stop reading are cut once
// they have taken nothing for a StallWindow with more than MaxQueued
// queued for them: the core keeps reading the server, whose
// worker threads therefore never block on it, so the monitor's root DSE
// check and other sessions' first answers keep coming, no server is
// marked down or OFFLINE, and an innocent client is served throughout.
func TestStalledReadersBlameNoServer(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(3000)})
	h := newHarness(t, stallDLP(sl, "FO",
		`{"object": "LoadBalancer", "name": "FO", "algorithm": "failover", "routes": [{"server": "L1", "priority": 1}, {"server": "L2", "priority": 2}]}`),
		func(c *core.Config) { c.WriteTimeout = 30 * time.Second; c.Now = time.Now })
	waitWithin(t, 30*time.Second, "the monitor's first check", func() bool { return h.backend(t, "L1").LastCheck != "" })
	stall(t, h.addr, 4)
	clientsCut(t, h, 4)
	nextChecks(t, h, "L1", "L2")
	noServerBlamed(t, h, "L1", "L2")
	if got := h.targets("search"); len(got) == 0 || got[len(got)-1] != "L1" {
		t.Errorf("the last search went to %v, want L1 (no failover)", got[max(0, len(got)-1):])
	}
}

// The same stall in two waves over a saturation balancer (wave 2 comes
// when wave 1 may have moved traffic to L2; were L2 taken out too, no
// route would be up): every stalled client is cut, both servers stay up,
// and the innocent client's search is answered.
func TestStalledReadersSaturationWaves(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(3000)})
	h := newHarness(t, stallDLP(sl, "SAT",
		`{"object": "LoadBalancer", "name": "SAT", "algorithm": "saturation", "threshold": 70, "alert": 50, "routes": [{"server": "L1", "priority": 1}, {"server": "L2", "priority": 2}]}`),
		func(c *core.Config) { c.Now = time.Now })
	waitWithin(t, 30*time.Second, "the monitor's first check", func() bool { return h.backend(t, "L1").LastCheck != "" })
	stall(t, h.addr, 4)
	clientsCut(t, h, 4)
	stall(t, h.addr, 4)
	clientsCut(t, h, 8)
	nextChecks(t, h, "L1", "L2")
	noServerBlamed(t, h, "L1", "L2")
	if err := innocent(t, h); err != nil {
		t.Errorf("an innocent client after both waves: %v", err)
	}
}

// The core's root DSE search on a fresh backend connection uses message
// id 2147483647: a client whose first, anonymous operation uses that id
// gets its own answer (not the root DSE's, nor none), and one that
// pipelines a bind with that id behind its first search gets the bind's
// answer (it does not hang): the client's
// operations on that connection wait until the core's search there is
// answered.
func TestClientUsesCoreMessageID(t *testing.T) {
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	h := newHarness(t, allBalanced(sl, 3, 60, 3600, "P",
		`{"object": "LoadBalancer", "name": "P", "algorithm": "proportional", "routes": [{"server": "L1"}, {"server": "L2"}]}`), nil)
	const coreID = 1<<31 - 1
	// next reads the answers up to the first final one, naming the entries.
	next := func(r *wire.Reader) (dns []string, final *wire.Message, err error) {
		for {
			raw, err := r.Next()
			if err != nil {
				return dns, nil, err
			}
			m, err := wire.Parse(raw)
			if err != nil {
				return dns, nil, err
			}
			if m.Op == wire.TagSearchResultEntry {
				dns = append(dns, m.EntryDN)
				continue
			}
			return dns, m, nil
		}
	}
	t.Run("first operation", func(t *testing.T) {
		bad := 0
		for i := range 100 {
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write(searchAttrsPDU(coreID, alice, "cn"))
			dns, final, err := next(wire.NewReader(c))
			c.Close()
			if err != nil || len(dns) != 1 || dns[0] != alice || final.ID != coreID || final.Op != wire.TagSearchResultDone {
				if bad++; bad <= 3 {
					t.Errorf("session %d: entries %q, final %+v, err %v", i, dns, final, err)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%d of 100 sessions did not get their own answer", bad)
		}
	})
	t.Run("pipelined bind", func(t *testing.T) {
		bad := 0
		for i := range 50 {
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write(append(searchAttrsPDU(1, alice, "cn"), wire.BindRequest(coreID, alice, []byte("alice-pw"))...))
			// The bind's answer, and the search's if it comes first: a
			// server may abandon an operation outstanding when a bind
			// arrives (RFC 4511 §4.2.1), which slapd does when both
			// went out together behind the core's search.
			r := wire.NewReader(c)
			var entries []string
			var bind *wire.Message
			for err == nil && bind == nil {
				var dns []string
				var final *wire.Message
				dns, final, err = next(r)
				entries = append(entries, dns...)
				switch {
				case final == nil:
				case final.ID == 1 && final.Op == wire.TagSearchResultDone && len(entries) == 1:
				case final.ID == coreID && final.Op == wire.TagBindResponse:
					bind = final
				default:
					err = fmt.Errorf("unexpected answer %+v after entries %q", final, entries)
				}
			}
			ok := err == nil && bind.ResultCode == wire.ResultSuccess && (len(entries) == 0 || entries[0] == alice)
			c.Close()
			if !ok {
				if bad++; bad <= 3 {
					t.Errorf("session %d: search entries %q, bind answer %+v, err %v", i, entries, bind, err)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%d of 50 sessions lost an answer", bad)
		}
	})
	noServerBlamed(t, h, "L1", "L2")
}
