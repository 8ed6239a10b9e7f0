package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/deploy/monitoring"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
	"github.com/edgefleet/edgefleet/probe"
)

// buildProbe builds this command once per test run.
func buildProbe(t *testing.T) string {
	return testbed.Build(t, "github.com/edgefleet/edgefleet/cmd/probe")
}

func TestMain(m *testing.M) { testbed.Main(m) }

// fleetArgs are the flags naming a test fleet, as an agent would give them.
func fleetArgs(f *stack.Fleet) []string {
	p := f.Origin.PKI
	return []string{"--name", testbed.ServerName, "--port", strconv.Itoa(f.Port), "--dns", f.Named.Addr,
		"--ca", p.Path("ca.pem"), "--cert", p.Path("agent.pem"), "--key", p.Path("agent.key"), "--budget", "1s"}
}

func run(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// TestRankJSON: `probe rank --format json` prints the shape of
// docs/probe.md (and nothing else), and the state file holds the same document.
func TestRankJSON(t *testing.T) {
	bin := buildProbe(t)
	f := stack.NewFleet(t, stack.KindEdge, stack.KindHole)
	state := filepath.Join(t.TempDir(), "edges.json")
	out, errOut, code := run(t, bin, append(fleetArgs(f), "rank", "--state", state, "--format", "json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range doc {
			if !yield(k) {
				return
			}
		}
	})
	if want := []string{"addresses", "chosen", "measured_at", "name", "ranking"}; !slices.Equal(keys, want) {
		t.Fatalf("keys %v, want %v:\n%s", keys, want, out)
	}
	ranking := doc["ranking"].([]any)
	first, second := ranking[0].(map[string]any), ranking[1].(map[string]any)
	if first["addr"] != f.Addrs[0] || first["ok"] != true || doc["chosen"] != f.Addrs[0] {
		t.Fatalf("first entry %v, chosen %v", first, doc["chosen"])
	}
	for _, k := range []string{"tcp_connect_ms", "tls_handshake_ms", "app_rtt_ms"} {
		if v, ok := first[k].(float64); !ok || v <= 0 {
			t.Fatalf("%s = %v in %v", k, first[k], first)
		}
	}
	for _, e := range ranking {
		entry := e.(map[string]any)
		if keys := slices.Sorted(maps.Keys(entry)); !slices.Equal(keys, []string{"addr", "app_rtt_ms", "error", "ok", "tcp_connect_ms", "tls_handshake_ms"}) {
			t.Fatalf("ranking entry keys %v: %v", keys, entry)
		}
	}
	if first["error"] != "" {
		t.Fatalf("a success with an error: %v", first)
	}
	if second["ok"] != false || !strings.Contains(second["error"].(string), "budget") {
		t.Fatalf("black hole entry %v", second)
	}
	var printed, saved probe.Ranking
	json.Unmarshal([]byte(out), &printed)
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(data, &saved)
	if !reflect.DeepEqual(printed, saved) {
		t.Fatalf("state file %s differs from the output %s", data, out)
	}

	// No choice keeps the shape: the reason goes to stderr, not into a
	// sixth key.
	args := fleetArgs(f)
	args[1] = "nowhere.edgefleet.test"
	out, errOut, code = run(t, bin, append(args, "rank", "--format", "json")...)
	doc = nil
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
		t.Fatalf("no choice: exit %d, %v:\n%s%s", code, err, out, errOut)
	}
	if keys := slices.Sorted(maps.Keys(doc)); !slices.Equal(keys, []string{"addresses", "chosen", "measured_at", "name", "ranking"}) || doc["chosen"] != "" {
		t.Fatalf("no choice: keys %v:\n%s", keys, out)
	}
	if !strings.Contains(errOut, "no choice (dial nowhere.edgefleet.test)") {
		t.Fatalf("no choice: stderr %q does not say why", errOut)
	}
}

// TestMonitorOnce: one round as a table; an edge whose origin is gone is
// down and makes the exit status 1; all up is 0.
func TestMonitorOnce(t *testing.T) {
	bin := buildProbe(t)
	f := stack.NewFleet(t, stack.KindEdge, stack.KindOrphan)
	out, errOut, code := run(t, bin, append(fleetArgs(f), "monitor", "--once")...)
	if code != 1 || !strings.Contains(errOut, "edge "+f.Addrs[1]+" is down") {
		t.Fatalf("exit %d, stderr %q; want 1 naming the orphan edge", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "ADDR") ||
		!strings.Contains(lines[2], f.Addrs[0]) || !strings.Contains(lines[2], " up ") ||
		!strings.Contains(lines[3], f.Addrs[1]) || !strings.Contains(lines[3], " down ") {
		t.Fatalf("table:\n%s", out)
	}

	up := stack.NewFleet(t, stack.KindEdge, stack.KindEdge)
	if out, errOut, code := run(t, bin, append(fleetArgs(up), "monitor", "--once", "--format", "json")...); code != 0 {
		t.Fatalf("all up: exit %d, %s\n%s", code, errOut, out)
	}
}

// TestWatchPrintsEvents: after a failover (the state file says the far
// edge is in use although the near one ranks first), `probe watch` retries
// the near edge and prints one better-edge event after two good rounds.
func TestWatchPrintsEvents(t *testing.T) {
	bin := buildProbe(t)
	f := stack.NewFleet(t, stack.KindEdge, stack.KindSlow)
	near, far := f.Addrs[0], f.Addrs[1]
	state := filepath.Join(t.TempDir(), "edges.json")
	r := probe.Ranking{Name: testbed.ServerName, Addresses: []string{"127.0.0.2", "127.0.0.3"}, MeasuredAt: time.Now(),
		Ranking: []probe.Result{{Addr: near, OK: true, TLSHandshakeMS: 2}, {Addr: far, OK: true, TLSHandshakeMS: 90}}, Chosen: far}
	if err := probe.SaveState(state, r); err != nil {
		t.Fatal(err)
	}
	// Logs go to stderr and the ranking and events to stdout; StartCmd
	// keeps both in one buffer, and only events are one-line JSON objects.
	p := testbed.StartCmd(t, exec.Command(bin, append(fleetArgs(f), "watch", "--state", state, "--interval", "200ms", "--format", "json")...))
	var ev probe.Event
	for deadline := time.Now().Add(20 * time.Second); ev.Reason == ""; {
		for _, l := range strings.Split(p.Output(), "\n") {
			if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &ev) == nil && ev.Reason != "" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event after 20 s; output:\n%s", p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ev.Reason != probe.ReasonBetterEdge || ev.From != far || ev.To != near {
		t.Fatalf("event %+v, want better-edge %s → %s", ev, far, near)
	}
	if saved, err := probe.LoadState(state); err != nil || saved.Chosen != near {
		t.Fatalf("state after the switch: %+v %v", saved, err)
	}
}

// TestBadConfiguration: each bad value exits 2 with one line naming it,
// before any probe.
func TestBadConfiguration(t *testing.T) {
	bin := buildProbe(t)
	dir := t.TempDir()
	cfgFile := testbed.WriteFile(t, dir, "probe.yaml", "name: ldap.example.test\nbudgit: 2s\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rank"}, "name: required"},
		{[]string{"rank", "--name", "n", "--port", "70000"}, "port: 70000 is not a TCP port"},
		{[]string{"rank", "--name", "n", "--budget", "0s"}, "budget: 0s must be positive"},
		{[]string{"rank", "--name", "n", "--format", "xml"}, `format: "xml" is not table or json`},
		{[]string{"rank", "--name", "n", "--dns", "nowhere"}, `dns: "nowhere" is not host:port`},
		{[]string{"rank", "--name", "n", "--ca", filepath.Join(dir, "missing.pem")}, "read ca"},
		{[]string{"rank", "--name", "n", "--cert", "a.pem"}, "give both cert and key"},
		{[]string{"watch", "--name", "n", "--interval", "-1s"}, "interval: -1s must be positive"},
		{[]string{"rank", "--name", "n", "--connect-timeout", "0s"}, "connect_timeout: 0s must be positive"},
		{[]string{"monitor", "--name", "n", "--metrics", "9104"}, `metrics: "9104" is not host:port`},
		{[]string{"monitor", "--config", testbed.WriteFile(t, dir, "mon.yaml", "name: n\nmonitor_interval: 0s\n")}, "monitor_interval: 0s must be positive"},
		{[]string{"rank", "--config", cfgFile}, `unknown key "budgit"`},
		{[]string{"watch", "--config", testbed.WriteFile(t, dir, "nan.yaml", "name: n\nmin_gain_ratio: .nan\n")}, "min_gain_ratio: NaN is not in [0, 1)"},
		{[]string{}, "a command is required"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, errOut, code := run(t, bin, tc.args...)
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			last := lines[len(lines)-1]
			if code != 2 || !strings.Contains(last, tc.want) || !strings.HasPrefix(last, "probe: ") {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errOut, tc.want)
			}
		})
	}
}

// TestMonitorMetrics: `probe monitor` serves every family
// deploy/monitoring lists for the probe on /metrics, with a sample, and
// GET /status as JSON.
func TestMonitorMetrics(t *testing.T) {
	bin := buildProbe(t)
	f := stack.NewFleet(t, stack.KindEdge, stack.KindOrphan)
	addr := testbed.FreeAddr(t, "127.0.0.1")
	testbed.Start(t, bin, append(fleetArgs(f), "monitor", "--metrics", addr, "--interval", "1h")...)
	testbed.WaitTCP(t, addr, 10*time.Second)
	var st probe.Status
	for deadline := time.Now().Add(10 * time.Second); len(st.Edges) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("GET /status shows no round after 10 s")
		}
		resp, err := http.Get("http://" + addr + "/status")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
	}
	if len(st.Edges) != 2 || !st.Edges[0].Up || st.Edges[1].Up {
		t.Fatalf("status %+v, want the edge up and the orphan down", st)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for name, typ := range monitoring.Exported["probe"] {
		if !strings.Contains(string(body), "\n# TYPE "+name+" "+typ+"\n"+name) {
			t.Errorf("/metrics lacks %s %s with a sample", typ, name)
		}
	}
	if !strings.Contains(string(body), `edgefleet_probe_edge_up{addr="`+f.Addrs[1]+`"} 0`) {
		t.Errorf("/metrics does not say the orphan edge is down:\n%s", body)
	}
}

// TestPrintEvent: a better-edge event shows both fresh times; an
// edge-left event says the edge left the set (it was not probed, so it
// has no time), and a move to no choice says the name.
func TestPrintEvent(t *testing.T) {
	at := time.Date(2026, 12, 1, 7, 12, 28, 0, time.UTC)
	for _, tc := range []struct {
		ev   probe.Event
		want string
	}{
		{probe.Event{Reason: probe.ReasonBetterEdge, From: "127.0.0.3:23008", To: "127.0.0.2:23008", FromMS: 86.477, ToMS: 2.83, At: at},
			"2026-12-01T07:12:28Z better-edge: 127.0.0.3:23008 (86.477 ms) -> 127.0.0.2:23008 (2.830 ms)\n"},
		{probe.Event{Reason: probe.ReasonEdgeLeft, From: "127.0.0.3:23008", To: "127.0.0.2:23008", ToMS: 2.83, At: at},
			"2026-12-01T07:12:28Z edge-left: 127.0.0.3:23008 (left the set) -> 127.0.0.2:23008 (2.830 ms)\n"},
		{probe.Event{Reason: probe.ReasonEdgeLeft, From: "127.0.0.3:23008", At: at},
			"2026-12-01T07:12:28Z edge-left: 127.0.0.3:23008 (left the set) -> (the name)\n"},
		{probe.Event{Reason: probe.ReasonBetterEdge, To: "127.0.0.2:23008", ToMS: 2.83, At: at},
			"2026-12-01T07:12:28Z better-edge: (the name) -> 127.0.0.2:23008 (2.830 ms)\n"},
	} {
		var b strings.Builder
		printEvent(&b, "table", tc.ev)
		if b.String() != tc.want {
			t.Errorf("printEvent(%+v):\n%q, want\n%q", tc.ev, b.String(), tc.want)
		}
	}
}

// TestWatchEdgeLeft: `probe watch` on three edges; the chosen one is
// removed from the real named (what fleet rotate does). The event it
// prints has its own reason, edge-left, and names a remaining edge; the
// state file records that edge.
func TestWatchEdgeLeft(t *testing.T) {
	bin := buildProbe(t)
	f := stack.NewFleet(t, stack.KindEdge, stack.KindEdge, stack.KindEdge)
	state := filepath.Join(t.TempDir(), "edges.json")
	cmd := exec.Command(bin, append(fleetArgs(f), "watch", "--state", state, "--interval", "200ms")...)
	// No better-edge between three equal edges, however the probe times
	// of a loaded machine vary: the only move is the one the test makes.
	cmd.Env = append(os.Environ(), "EDGEFLEET_MIN_GAIN=1h")
	p := testbed.StartCmd(t, cmd)
	var chosen string
	for deadline := time.Now().Add(20 * time.Second); chosen == ""; time.Sleep(50 * time.Millisecond) {
		if st, err := probe.LoadState(state); err == nil {
			chosen = st.Chosen
		}
		if time.Now().After(deadline) {
			t.Fatalf("no choice in the state file after 20 s:\n%s", p.Output())
		}
	}
	f.Unpublish(t, chosen)
	line := regexp.MustCompile(`(?m)^\S+ edge-left: ` + regexp.QuoteMeta(chosen) + ` \(left the set\) -> (\S+) \([0-9.]+ ms\)$`)
	var m []string
	for deadline := time.Now().Add(20 * time.Second); m == nil; time.Sleep(50 * time.Millisecond) {
		m = line.FindStringSubmatch(p.Output())
		if time.Now().After(deadline) {
			t.Fatalf("no edge-left event for %s after 20 s:\n%s", chosen, p.Output())
		}
	}
	if m[1] == chosen || !slices.Contains(f.Addrs, m[1]) || strings.Contains(p.Output(), probe.ReasonBetterEdge) {
		t.Fatalf("edge-left to %s:\n%s", m[1], p.Output())
	}
	if st, err := probe.LoadState(state); err != nil || st.Chosen != m[1] || len(st.Addresses) != 2 {
		t.Fatalf("state after the move: %+v %v, want %s in a set of two", st, err, m[1])
	}
}
