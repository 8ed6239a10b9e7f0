package core_test

import (
	"github.com/edgefleet/edgefleet/ldap/wire"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
)

// Clients whose binds occupy every worker thread of slapd at once (wrong
// passwords for a user whose hash costs seconds) make every other request
// wait behind them — the core's root DSE search on a new client's fresh
// connection too, and slapd sends nothing meanwhile. That is a server busy
// with clients' operations, not a frozen one: no server is marked OFFLINE
// and the new client is answered by L1 once a thread is free.
func TestSaturatedBySlowBindsNotOffline(t *testing.T) {
	sl := testbed.StartSlapds(t, 3, testbed.SlapdConfig{LDIF: slowLDIF(t), Threads: 2})
	h := newHarness(t, dlpFile(1, 60, named(sl),
		rule("ALL", "(user=*)", []string{"L1", "L2", "L3"}, `"loadbalance": 0`), proxy([]string{"ALL"}, nil)),
		func(c *core.Config) { c.Now = time.Now })
	var wg sync.WaitGroup
	for range 4 {
		c := h.dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Bind(slow, "wrong")
		}()
	}
	// Both of slapd's threads are in a bind once two binds are sent.
	waitWithin(t, 20*time.Second, "two binds sent to L1", func() bool { return core.Owing(h.srv, "L1") >= 2 })
	c := h.dial(t)
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Errorf("a bind behind the slow ones: %v", err)
	}
	wg.Wait()
	noneOffline(t, h, sl)
	if n := core.Owing(h.srv, "L1"); n != 0 {
		t.Errorf("L1 owes %d answers after every bind was answered", n)
	}
}

// The other side of the rule above: a frozen server (SIGSTOP) that owes a
// client answers — a bound client keeps sending searches to it on its
// connection, one every 200 ms — is busy only until it has been silent
// for the busy limit (3 s here) since it began to owe; the requests sent
// later do not restart that clock. A new client's bind then marks it
// OFFLINE and is answered by L2.
func TestFrozenServerOwingAnswersGoesOffline(t *testing.T) {
	core.SetBusyLimit(t, 3*time.Second)
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	t.Cleanup(sl[0].Thaw)
	h := newHarness(t, dlpFile(1, 60, named(sl),
		rule("ALL", "(user=*)", []string{"L1", "L2"}, `"loadbalance": 0`), proxy([]string{"ALL"}, nil)),
		func(c *core.Config) { c.Now = time.Now })
	a, _ := h.rawBind(t, 1)
	defer a.Close()
	sl[0].Freeze()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := int32(2); ; id++ {
			if _, err := a.Write(wire.RootDSESearch(id)); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	boundClient(t, h)
	took := time.Since(start)
	close(stop)
	wg.Wait()
	t.Logf("the bind was answered after %v", took.Round(10*time.Millisecond))
	if got := h.targets("bind"); strings.Join(got, ",") != "L1,L2" {
		t.Errorf("binds went to %v, want L1 (the first client's) then L2", got)
	}
	if !h.srv.Health().Offline("L1") {
		t.Error("the frozen L1 is not OFFLINE")
	}
	if took < 3*time.Second {
		t.Errorf("L1 was given up after %v, before the busy limit: the searches it owed did not count", took)
	}
	if n := core.Owing(h.srv, "L1"); n < 1 {
		t.Errorf("L1 owes %d answers while the first client's searches wait on it", n)
	}
	a.Close()
	waitWithin(t, 20*time.Second, "the first client's session to end", func() bool { return core.Owing(h.srv, "L1") == 0 })
}
