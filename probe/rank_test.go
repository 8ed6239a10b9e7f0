package probe_test

import (
	"context"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/probe"
	"github.com/go-ldap/ldap/v3"
)

// TestRankEndToEnd: the A set served by a real named holds a normal edge,
// an edge 40 ms farther, a refused address and a black hole. The ranking
// puts the near edge first, the far one second, the failures last with
// their error; it costs one budget (the black hole's) and no more; the
// refused address costs nothing; the state file holds the same ranking;
// and DialContext connects through the chosen edge to the directory.
func TestRankEndToEnd(t *testing.T) {
	f := newFleet(t, kindSlow, kindEdge, kindRefused, kindHole)
	slow, near, refused, hole := f.addrs[0], f.addrs[1], f.addrs[2], f.addrs[3]
	cfg := f.config(t)
	d := f.dialer(cfg)

	start := time.Now()
	r := d.Rank(context.Background())
	took := time.Since(start)
	t.Logf("ranking in %v: %+v", took, r)

	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
	if r.Name != cfg.Name || !reflect.DeepEqual(r.Addresses, ips) || r.NoChoice != "" {
		t.Fatalf("ranking of %v: %+v", ips, r)
	}
	var order []string
	for _, e := range r.Ranking {
		order = append(order, e.Addr)
	}
	if want := []string{near, slow, refused, hole}; !reflect.DeepEqual(order, want) {
		t.Fatalf("order %v, want near, slow, refused, black hole %v", order, want)
	}
	if r.Chosen != near {
		t.Fatalf("chosen %q, want the near edge %s", r.Chosen, near)
	}
	n, s, ref, bh := r.Ranking[0], r.Ranking[1], r.Ranking[2], r.Ranking[3]
	if !n.OK || !s.OK || s.Total() < n.Total()+slowRTT/2 {
		t.Fatalf("near %+v, slow %+v: the far edge must cost about %v more", n, s, slowRTT)
	}
	if ref.OK || !strings.Contains(ref.Error, "connection refused") || ref.TCPConnectMS != 0 {
		t.Fatalf("refused entry %+v", ref)
	}
	if bh.OK || !strings.Contains(bh.Error, "budget") || bh.TCPConnectMS != 0 {
		t.Fatalf("black hole entry %+v", bh)
	}
	// One budget however many black holes is a figure bench/probe
	// measures; here only a hang is a failure (the machine may be slow).
	if took > 10*cfg.Budget {
		t.Fatalf("the ranking took %v: it hung (budget %v)", took, cfg.Budget)
	}

	st, err := probe.LoadState(cfg.State)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Ranking, r.Ranking) || st.Chosen != r.Chosen || !st.MeasuredAt.Equal(r.MeasuredAt) {
		t.Fatalf("state file %+v, want the ranking %+v", st, r)
	}

	// The refused address alone: answered by the refusal, not by the
	// budget running out.
	if res := probe.Probe(context.Background(), refused, f.o.AgentTLS(), cfg.Budget); res.OK ||
		!strings.Contains(res.Error, "connection refused") || strings.Contains(res.Error, "budget") {
		t.Fatalf("refused probe %+v: want a refusal, not the budget", res)
	}

	c, err := d.DialContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.RemoteAddr().String() != near {
		t.Fatalf("dialed %s, want the chosen edge %s", c.RemoteAddr(), near)
	}
	who := whoAmI(t, c)
	if who != "" {
		t.Fatalf("anonymous whoami through the edge: %q", who)
	}
}

// whoAmI binds as alice over c and returns the server's WhoAmI answer
// ("" when bind is skipped); it fails the test on any error.
func whoAmI(t *testing.T, c net.Conn) string {
	t.Helper()
	l := ldap.NewConn(c, true)
	l.Start()
	res, err := l.WhoAmI(nil)
	if err != nil {
		t.Fatalf("whoami through the edge: %v", err)
	}
	return res.AuthzID
}

// TestRankFewerThanTwo: a name with one address skips everything: no
// probe, no state file, no choice.
func TestRankFewerThanTwo(t *testing.T) {
	f := newFleet(t, kindEdge)
	cfg := f.config(t)
	r := f.dialer(cfg).Rank(context.Background())
	if r.Chosen != "" || len(r.Ranking) != 0 || !strings.Contains(r.NoChoice, "nothing to choose") {
		t.Fatalf("one address: %+v", r)
	}
	if _, err := probe.LoadState(cfg.State); err == nil {
		t.Fatal("a state file for one address")
	}
}

// TestWatcherRotation: the chosen edge is removed from the A set in the
// real named (what fleet rotate does): the next watcher round moves the
// agent to a remaining edge with an edge-left event, and the state file
// records the new set and choice.
func TestWatcherRotation(t *testing.T) {
	f := newFleet(t, kindEdge, kindEdge, kindEdge)
	cfg := f.config(t)
	d := f.dialer(cfg)
	r := d.Rank(context.Background())
	if r.Chosen == "" {
		t.Fatalf("no choice: %+v", r)
	}
	w := &probe.Watcher{Dialer: d}
	if ev, ok := w.Round(context.Background()); ok {
		t.Fatalf("a switch with nothing changed: %+v", ev)
	}
	f.Unpublish(t, r.Chosen)
	ev, ok := w.Round(context.Background())
	if !ok || ev.Reason != probe.ReasonEdgeLeft || ev.From != r.Chosen || ev.To == r.Chosen || ev.To == "" || ev.FromMS != 0 {
		t.Fatalf("after the chosen edge left the set: %+v %v, want edge-left to another edge", ev, ok)
	}
	st, err := probe.LoadState(cfg.State)
	if err != nil || st.Chosen != ev.To || len(st.Addresses) != 2 {
		t.Fatalf("state after the rotation: %+v %v", st, err)
	}
}

// TestNoChoicePaths: a name the DNS does not know, and a set where nobody
// answers, both end in no choice; the dialer then dials the name and
// fails exactly as it would without edgefleet.
func TestNoChoicePaths(t *testing.T) {
	f := newFleet(t, kindRefused, kindRefused)
	cfg := f.config(t)

	unknown := cfg
	unknown.Name = "nowhere.edgefleet.test"
	d := f.dialer(unknown)
	if r := d.Rank(context.Background()); r.Chosen != "" || !strings.Contains(r.NoChoice, "resolve nowhere.edgefleet.test") {
		t.Fatalf("unknown name: %+v", r)
	}
	if _, err := d.DialContext(context.Background()); err == nil || !strings.Contains(err.Error(), "no such host") {
		t.Fatalf("dial of an unknown name: %v, want the resolver's no such host", err)
	}

	d = f.dialer(cfg)
	r := d.Rank(context.Background())
	if r.Chosen != "" || r.NoChoice != "no address answered the probe" || len(r.Ranking) != 2 {
		t.Fatalf("nobody answers: %+v", r)
	}
	if st, err := probe.LoadState(cfg.State); err != nil || st.Chosen != "" || len(st.Ranking) != 2 {
		t.Fatalf("the state of a set nobody answered: %+v %v", st, err)
	}
	if _, err := d.DialContext(context.Background()); err == nil || !strings.Contains(err.Error(), "dial "+cfg.Name) {
		t.Fatalf("dial with nobody answering: %v, want the name's own dial error", err)
	}
}
