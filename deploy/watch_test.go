package deploy

import (
	"reflect"
	"testing"
	"time"
)

// history replays checks (true: passed) into a Health.
func history(edge string, withdrawn bool, checks ...bool) Health {
	h := Health{Edge: edge, Withdrawn: withdrawn}
	for _, ok := range checks {
		h.Record(ok, "refused")
	}
	return h
}

func ops(d Decision) []string {
	var s []string
	for _, a := range d.Actions {
		s = append(s, a.Op+" "+a.Edge)
	}
	return s
}

func TestDecideFallRiseMinEdges(t *testing.T) {
	w := DefaultWatch() // fall 3, rise 2, min_edges 2
	F, P := false, true
	cases := []struct {
		name  string
		inv   int
		edges []Health
		want  []string
		all   bool
	}{
		{"two failures are not enough", 3, []Health{history("e1", false, P, F, F), history("e2", false, P), history("e3", false, P)}, nil, false},
		{"fall failures in a row withdraw", 3, []Health{history("e1", false, F, F, F), history("e2", false, P), history("e3", false, P)}, []string{"withdraw e1"}, false},
		{"a pass resets the failures", 3, []Health{history("e1", false, F, F, P, F, F), history("e2", false, P), history("e3", false, P)}, nil, false},
		{"never below min_edges", 3, []Health{history("e1", false, F, F, F, F), history("e2", false, F, F, F), history("e3", false, P)},
			[]string{"withdraw e1", "hold e2"}, false},
		{"min_edges is all when fewer", 1, []Health{history("e1", false, F, F, F)}, []string{"hold e1"}, true},
		{"min_edges of two with two edges", 2, []Health{history("e1", false, F, F, F), history("e2", false, P)}, []string{"hold e1"}, false},
		{"every edge failing withdraws none", 3, []Health{history("e1", false, F, F, F), history("e2", false, F, F, F), history("e3", false, F)},
			[]string{"hold e1", "hold e2"}, true},
		{"rise passes restore", 3, []Health{history("e1", true, F, P, P), history("e2", false, P), history("e3", false, P)}, []string{"restore e1"}, false},
		{"a flapping edge stays out", 3, []Health{history("e1", true, P, F, P, F, P), history("e2", false, P), history("e3", false, P)}, nil, false},
		{"a restoration makes room for a withdrawal", 3, []Health{history("e1", true, P, P), history("e2", false, F, F, F), history("e3", false, P)},
			[]string{"restore e1", "withdraw e2"}, false},
		{"unchecked edges are not counted", 3, []Health{{Edge: "e1"}, history("e2", false, F, F, F), history("e3", false, P)}, []string{"withdraw e2"}, false},
	}
	for _, c := range cases {
		d := Decide(w, c.inv, c.edges)
		if got := ops(d); !reflect.DeepEqual(got, c.want) || d.AllFailing != c.all {
			t.Errorf("%s: %v all_failing=%v, want %v all_failing=%v", c.name, got, d.AllFailing, c.want, c.all)
		}
	}
	d := Decide(w, 3, []Health{history("e1", false, F, F, F), history("e2", false, P), history("e3", false, P)})
	if a := d.Actions[0]; a.Reason != "3 failed checks" || a.LastErr != "refused" {
		t.Errorf("withdraw action %+v", a)
	}
}

func TestPauseFullJitter(t *testing.T) {
	w := Watch{Interval: 30 * time.Second}
	for r, want := range map[float64]time.Duration{0: 0, 0.5: 30 * time.Second, 0.999: 59940 * time.Millisecond} {
		if got := w.Pause(func() float64 { return r }); got != want {
			t.Errorf("Pause(%v) = %v, want %v", r, got, want)
		}
	}
}

func TestServingLeavesWithdrawnOut(t *testing.T) {
	cfg := Config{Edges: []Edge{{Name: "e1", IPv4: "192.0.2.1"}, {Name: "e2", IPv4: "192.0.2.2"}, {Name: "e3", IPv4: "192.0.2.3"}}}
	st := NewState()
	st.Withdraw(Edge{Name: "e2", IPv4: "192.0.2.2"}, "3 failed checks", time.Unix(0, 0))
	st.Withdraw(Edge{Name: "e3", IPv4: "192.0.2.99"}, "re-addressed since", time.Unix(0, 0))
	st.Withdraw(Edge{Name: "e9", IPv4: "192.0.2.9"}, "rotated out since", time.Unix(0, 0))
	got := Serving(cfg, st)
	if edgeNames(got.Edges) != "e1 e3" || len(cfg.Edges) != 3 {
		t.Errorf("serving %s (inventory %d edges)", edgeNames(got.Edges), len(cfg.Edges))
	}
	if _, ok := st.Withdrawn["e2"]; !ok || len(st.Withdrawn) != 1 {
		t.Errorf("withdrawals kept: %v", st.Withdrawn)
	}
	b := st.Marshal()
	back, err := ParseState(b)
	if err != nil || !back.IsWithdrawn(cfg.Edges[1]) {
		t.Errorf("state round trip: %v\n%s", err, b)
	}
}

func TestBackoffDoublesToThirtyMinutes(t *testing.T) {
	var got []time.Duration
	for n := 1; n <= 9; n++ {
		got = append(got, Backoff(30*time.Second, n))
	}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("back-off %v, want %v", got, want)
	}
}

func TestParseReplacement(t *testing.T) {
	e, err := ParseReplacement([]byte(`{"name": "e7", "ipv4": "192.0.2.7", "ipv6": "2001:db8::7", "ssh": "root@192.0.2.7", "host_key": "ssh-ed25519 AAAA"}` + "\n"))
	if err != nil || e.String() != "e7=192.0.2.7,2001:db8::7" || e.SSH != "root@192.0.2.7" || e.HostKey != "ssh-ed25519 AAAA" {
		t.Errorf("ParseReplacement: %+v %v", e, err)
	}
	for _, bad := range []string{``, `not json`, `{"name": "e7"}`, `{"name": "-", "ipv4": "192.0.2.7"}`, `{"name": "e7", "ipv4": "2001:db8::7"}`,
		`{"name": "e7", "ipv4": "192.0.2.7", "zone": "x"}`, `{"name": "e7", "ipv4": "192.0.2.7"} {"name": "e8", "ipv4": "192.0.2.8"}`} {
		if _, err := ParseReplacement([]byte(bad)); err == nil {
			t.Errorf("ParseReplacement(%q): no error", bad)
		}
	}
}
