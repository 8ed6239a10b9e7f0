package deploy

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// docSection is the text of docs/dns-deploy.md from heading to the next
// heading of the same level.
func docSection(t *testing.T, heading string) string {
	t.Helper()
	doc := testbed.Doc(t, "docs/dns-deploy.md")
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/dns-deploy.md has no %q", heading)
	}
	level := heading[:strings.Index(heading, " ")+1]
	if i := strings.Index(rest, "\n"+level); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

var handshake = regexp.MustCompile(`TLS handshake [0-9.]+ ms`)

// TestDocAddingAnEdge: the "Adding an edge" session is what the converger
// prints for it — e1 and e2 published and allowed, e3 added to fleet.yaml —
// but for the handshake figures.
func TestDocAddingAnEdge(t *testing.T) {
	sec := docSection(t, "## Adding an edge")
	_, block, _ := strings.Cut(sec, "```\n$ fleet apply --chain INPUT\n")
	block, _, _ = strings.Cut(block, "```")
	if block == "" {
		t.Fatal(`"Adding an edge" shows no fleet apply session`)
	}
	d1 := Edge{Name: "e1", IPv4: "10.77.0.11"}
	d2 := Edge{Name: "e2", IPv4: "10.77.0.12"}
	d3 := Edge{Name: "e3", IPv4: "10.77.0.13"}
	w := &fakeWorld{dns: RRSet{A: addrs("10.77.0.11", "10.77.0.12"), TTLA: 60}, allowed: []string{"e1", "e2"},
		clock: testbed.NewClock(time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC))}
	statePath := filepath.Join(t.TempDir(), StateFile)
	run := func(edges ...Edge) string {
		cfg := DefaultConfig()
		cfg.Name, cfg.Zone, cfg.Edges = "ldap.example.test", "example.test", edges
		out := &testbed.Buffer{}
		c := &Converger{Config: cfg, StatePath: statePath, DNS: fakeDNS{w}, Firewall: fakeFirewall{w},
			Probe: func(context.Context, string) ProbeResult { return ProbeResult{OK: true, HandshakeMS: 1} },
			Now:   w.clock.Now, Out: out}
		if err := c.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	run(d1, d2) // the state learns e1 and e2
	got := run(d1, d2, d3)
	if norm := func(s string) string { return handshake.ReplaceAllString(s, "TLS handshake N ms") }; norm(got) != norm(block) {
		t.Fatalf("fleet apply prints:\n%sthe page shows:\n%s", got, block)
	}
}

// TestDocRotationTimestamps: every "left DNS at" of the rotation sessions
// is the state file's left_dns, as the converger prints it.
func TestDocRotationTimestamps(t *testing.T) {
	sec := docSection(t, "## Rotating an edge: `fleet rotate`")
	_, rest, _ := strings.Cut(sec, "```json\n")
	js, _, _ := strings.Cut(rest, "```")
	st, err := ParseState([]byte(js))
	if err != nil || st.Edges["e1"] == nil {
		t.Fatalf("the rotation's state file: %v", err)
	}
	want := st.Edges["e1"].LeftDNS.UTC().Format(time.RFC3339)
	shown := regexp.MustCompile(`e1 left DNS at (\S+?);?\s`).FindAllStringSubmatch(sec, -1)
	if len(shown) < 3 {
		t.Fatalf("the rotation sessions show %d 'left DNS at', want the killed run's, the resume line and the resumed wait", len(shown))
	}
	for _, m := range shown {
		if m[1] != want {
			t.Errorf("a session says e1 left DNS at %s, the state file %s", m[1], want)
		}
	}
}

// TestDocPlanJSON: the `fleet dns plan --output json` of docs/dns-deploy.md
// is the plan of the page's inventory against an empty set, as the command
// prints it (indented JSON).
func TestDocPlanJSON(t *testing.T) {
	doc := testbed.Doc(t, "docs/dns-deploy.md")
	_, rest, ok := strings.Cut(doc, "$ fleet dns plan --output json\n")
	shown, _, _ := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("docs/dns-deploy.md shows no fleet dns plan --output json")
	}
	edges := []Edge{{Name: "e1", IPv4: "10.77.0.11"}, {Name: "e2", IPv4: "10.77.0.12", IPv6: "2001:db8:77::12"}}
	p, err := PlanDNS("ldap.example.test", RRSet{}, edges, 60, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(p.JSON(), "", "  ")
	if got := string(b) + "\n"; got != shown {
		t.Fatalf("the plan is:\n%sthe page shows:\n%s", got, shown)
	}
}
