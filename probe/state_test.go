package probe_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
	"github.com/edgefleet/edgefleet/probe"
)

func sampleRanking() probe.Ranking {
	return probe.Ranking{
		Name: "ldap.example.test", Addresses: []string{"192.0.2.1", "192.0.2.2", "2001:db8::1"},
		MeasuredAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Ranking: []probe.Result{
			{Addr: "192.0.2.2:636", OK: true, TCPConnectMS: 1.5, TLSHandshakeMS: 3.25, AppRTTMS: 1},
			{Addr: "[2001:db8::1]:636", OK: true, TCPConnectMS: 10, TLSHandshakeMS: 20, AppRTTMS: 10},
			{Addr: "192.0.2.1:636", Error: "tcp connect 192.0.2.1:636: connect: connection refused"},
		},
		Chosen: "[2001:db8::1]:636",
	}
}

// TestStateRoundTrip: SaveState writes what LoadState reads, 0600, and
// leaves no temp file behind; saving again replaces it whole.
func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	r := sampleRanking()
	for range 2 {
		if err := probe.SaveState(path, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := probe.LoadState(path)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("loaded %+v %v, want %+v", got, err, r)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v", st.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("files left in the state dir: %v", ents)
	}
}

// TestParseStateRejects: a state file that is not exactly what SaveState
// writes is corrupt, with a reason.
func TestParseStateRejects(t *testing.T) {
	good := `{"name": "n", "addresses": ["192.0.2.1", "192.0.2.2"], "measured_at": "2026-01-01T00:00:00Z",
	"ranking": [{"addr": "192.0.2.1:636", "ok": true}, {"addr": "192.0.2.2:636", "ok": false, "error": "x"}], "chosen": "192.0.2.1:636"}`
	if _, err := probe.ParseState([]byte(good)); err != nil {
		t.Fatalf("good state: %v", err)
	}
	for _, tc := range []struct{ name, data, want string }{
		{"empty", ``, "EOF"},
		{"truncated", good[:40], "unexpected EOF"},
		{"unknown field", strings.Replace(good, `"chosen"`, `"choice": 1, "chosen"`, 1), "unknown field"},
		{"trailing data", good + "{}", "after the JSON object"},
		{"no name", strings.Replace(good, `"name": "n"`, `"name": ""`, 1), "no name"},
		{"not an ip", strings.Replace(good, `"192.0.2.1", "192.0.2.2"`, `"192.0.2.1", "edge-2"`, 1), "not an IP"},
		{"unsorted", strings.Replace(good, `["192.0.2.1", "192.0.2.2"]`, `["192.0.2.2", "192.0.2.1"]`, 1), "not sorted"},
		{"entry outside the set", strings.Replace(good, `"addr": "192.0.2.2:636"`, `"addr": "192.0.2.9:636"`, 1), "not an address of the set"},
		{"entry twice", strings.Replace(good, `"addr": "192.0.2.2:636"`, `"addr": "192.0.2.1:636"`, 1), "not an address of the set"},
		{"success after failure", strings.Replace(strings.Replace(good, `"ok": true`, `"ok": false`, 1), `"ok": false, "error"`, `"ok": true, "error"`, 1), "a success after a failure"},
		{"chosen not ranked", strings.Replace(good, `"chosen": "192.0.2.1:636"`, `"chosen": "192.0.2.7:636"`, 1), "not a ranking entry"},
		{"no_choice", strings.Replace(good, `"chosen"`, `"no_choice": "x", "chosen"`, 1), "no_choice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := probe.ParseState([]byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// FuzzParseState: no input panics, and whatever parses saves and parses
// back to the same ranking.
func FuzzParseState(f *testing.F) {
	if err := probe.SaveState(filepath.Join(f.TempDir(), "s.json"), sampleRanking()); err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"name": "n", "addresses": [], "measured_at": "2026-01-01T00:00:00Z", "ranking": [], "chosen": ""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := probe.ParseState(data)
		if err != nil {
			return
		}
		path := filepath.Join(t.TempDir(), "s.json")
		if err := probe.SaveState(path, r); err != nil {
			t.Fatal(err)
		}
		again, err := probe.LoadState(path)
		if err != nil || !reflect.DeepEqual(again.Ranking, r.Ranking) || again.Chosen != r.Chosen || !again.MeasuredAt.Equal(r.MeasuredAt) {
			t.Fatalf("%q parsed to %+v, saved and loaded as %+v (%v)", data, r, again, err)
		}
	})
}

// TestStateSetChange: a state file measured on another set is stale even
// though its chosen address is still in the current set: Select measures;
// so is a fresh one of the same set measured for another name.
func TestStateSetChange(t *testing.T) {
	f := newFleet(t, kindEdge, kindEdge)
	cfg := f.config(t)
	old := probe.Ranking{Name: cfg.Name, Addresses: []string{"127.0.0.2", "127.0.0.3", "127.0.0.9"},
		MeasuredAt: time.Now().Add(-time.Minute),
		Ranking: []probe.Result{{Addr: f.addrs[1], OK: true, TLSHandshakeMS: 1}, {Addr: f.addrs[0], OK: true, TLSHandshakeMS: 2},
			{Addr: "127.0.0.9:1", Error: "gone"}},
		Chosen: f.addrs[1]}
	if err := probe.SaveState(cfg.State, old); err != nil {
		t.Fatal(err)
	}
	r := f.dialer(cfg).Select(context.Background())
	if !reflect.DeepEqual(r.Addresses, []string{"127.0.0.2", "127.0.0.3"}) || !r.MeasuredAt.After(old.MeasuredAt) || len(r.Ranking) != 2 {
		t.Fatalf("after an edge was removed Select used %+v, want a new measurement of the two", r)
	}
	// The same set, fresh: Select uses the state without probing.
	same := old
	same.Addresses = r.Addresses
	same.Ranking = old.Ranking[:2]
	if err := probe.SaveState(cfg.State, same); err != nil {
		t.Fatal(err)
	}
	if r := f.dialer(cfg).Select(context.Background()); !r.MeasuredAt.Equal(same.MeasuredAt) || r.Chosen != same.Chosen {
		t.Fatalf("same set, fresh: Select gave %+v, want the state %+v", r, same)
	}
	// The same set, fresh, but measured for another name (one state path
	// shared by two agents' configurations): not used, measured again.
	other := same
	other.Name = "other." + stack.Zone
	if err := probe.SaveState(cfg.State, other); err != nil {
		t.Fatal(err)
	}
	if r := f.dialer(cfg).Select(context.Background()); r.Name != cfg.Name || !r.MeasuredAt.After(other.MeasuredAt) {
		t.Fatalf("a state of another name: Select gave %+v, want a new measurement of %s", r, cfg.Name)
	}
	if st, err := probe.LoadState(cfg.State); err != nil || st.Name != cfg.Name {
		t.Fatalf("state after measuring: %+v %v, want %s's", st, err, cfg.Name)
	}
}

// TestStateNoChoice: a corrupt, unreadable or unwritable state file means
// no choice, and the dialer still connects, by the hostname.
func TestStateNoChoice(t *testing.T) {
	f := newFleet(t, kindEdge, kindEdge)
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	os.WriteFile(notDir, []byte("x"), 0o600)
	for _, tc := range []struct {
		name, state, want string
		setup             func(path string)
	}{
		{"corrupt", filepath.Join(dir, "corrupt.json"), "corrupt", func(p string) { os.WriteFile(p, []byte(`{"name": `), 0o600) }},
		{"unreadable", filepath.Join(dir, "a-dir"), "is a directory", func(p string) { os.Mkdir(p, 0o700) }},
		{"unwritable", filepath.Join(notDir, "state.json"), "not a directory", func(string) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup(tc.state)
			before, _ := os.ReadFile(tc.state)
			cfg := f.config(t)
			cfg.State = tc.state
			d := f.dialer(cfg)
			c, err := d.DialContext(context.Background())
			if err != nil {
				t.Fatalf("no choice must still connect by name: %v", err)
			}
			defer c.Close()
			if r := d.Current(); r.Chosen != "" || !strings.Contains(r.NoChoice, tc.want) {
				t.Fatalf("ranking in use %+v, want no choice because %q", r, tc.want)
			}
			if who := whoAmI(t, c); who != "" {
				t.Fatalf("whoami by name: %q", who)
			}
			if after, _ := os.ReadFile(tc.state); string(after) != string(before) {
				t.Fatalf("the state file changed from %q to %q", before, after)
			}
		})
	}
}

// TestStateRestart: a failover is written down, so a restarted agent
// keeps the ranking and stays on the edge it failed over to instead of
// going back to the one that just failed, even when that one is back.
func TestStateRestart(t *testing.T) {
	f := newFleet(t, kindEdge, kindSlow)
	near, far := f.addrs[0], f.addrs[1]
	cfg := f.config(t)
	d := f.dialer(cfg)
	first := d.Rank(context.Background())
	if first.Chosen != near {
		t.Fatalf("chosen %q, want %s", first.Chosen, near)
	}
	f.edges[near].Stop()
	c, err := d.DialContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if c.RemoteAddr().String() != far {
		t.Fatalf("failover to %s, want %s", c.RemoteAddr(), far)
	}
	f.restartEdge(t, near)

	restarted := f.dialer(cfg)
	c, err = restarted.DialContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := restarted.Current()
	if c.RemoteAddr().String() != far || r.Chosen != far {
		t.Fatalf("after a restart dialed %s (chosen %q), want the failover edge %s", c.RemoteAddr(), r.Chosen, far)
	}
	if !reflect.DeepEqual(r.Ranking, first.Ranking) || !r.MeasuredAt.Equal(first.MeasuredAt) {
		t.Fatalf("after a restart the ranking is %+v, want the measured one %+v", r, first)
	}
}

// TestStatePortChange: a state file measured on the same addresses but
// another port (636 before the port moved to the edges' port) is stale
// like one of another set: Select measures on the new port, and the
// agent's dial goes to an edge on it. It used to choose the old ip:636
// and walk only :636 addresses, a budget each, before dialling the name.
func TestStatePortChange(t *testing.T) {
	f := newFleet(t, kindEdge, kindEdge)
	cfg := f.config(t)
	var ips []string
	var old []probe.Result
	for _, a := range f.addrs {
		ip, _, _ := net.SplitHostPort(a)
		ips = append(ips, ip)
		old = append(old, probe.Result{Addr: net.JoinHostPort(ip, "636"), OK: true, TLSHandshakeMS: float64(len(old) + 1)})
	}
	slices.Sort(ips)
	st := probe.Ranking{Name: cfg.Name, Addresses: ips, MeasuredAt: time.Now().Add(-time.Minute), Ranking: old, Chosen: old[0].Addr}
	if err := probe.SaveState(cfg.State, st); err != nil {
		t.Fatal(err)
	}
	d := f.dialer(cfg)
	r := d.Select(context.Background())
	if !r.MeasuredAt.After(st.MeasuredAt) || !slices.Contains(f.addrs, r.Chosen) {
		t.Fatalf("after the port changed to %d Select used %+v, want a new measurement on it", cfg.Port, r)
	}
	for _, e := range r.Ranking {
		if !slices.Contains(f.addrs, e.Addr) {
			t.Errorf("ranking entry %s is not on port %d", e.Addr, cfg.Port)
		}
	}
	c, err := f.dialer(cfg).DialContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !slices.Contains(f.addrs, c.RemoteAddr().String()) {
		t.Fatalf("the agent dialled %s, want an edge of %v", c.RemoteAddr(), f.addrs)
	}
	saved, err := probe.LoadState(cfg.State)
	if err != nil || !slices.Contains(f.addrs, saved.Chosen) {
		t.Fatalf("state file after the port change: %+v, %v", saved, err)
	}
}

// TestSaveStateRefusesInvalid: a ranking LoadState would reject (here a
// chosen edge that is not one of its entries, what a failover racing a
// watcher round once wrote) is not written: the file keeps the last
// valid ranking, readable.
func TestSaveStateRefusesInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	good := sampleRanking()
	if err := probe.SaveState(path, good); err != nil {
		t.Fatal(err)
	}
	bad := good
	bad.Chosen = "192.0.2.9:636"
	if err := probe.SaveState(path, bad); err == nil || !strings.Contains(err.Error(), "not a ranking entry") {
		t.Fatalf("saving a chosen edge outside the ranking: %v, want refused", err)
	}
	if got, err := probe.LoadState(path); err != nil || got.Chosen != good.Chosen {
		t.Fatalf("after the refused save: %+v %v, want the last valid ranking", got, err)
	}
}

// TestSaveStateRemovesCrashTemps: a crash between the temp file and the
// rename leaves .state.json.<digits>; the next save removes such files
// once they are older than any save in flight could be, and leaves a
// fresh one (another process's save in flight) and unrelated files.
func TestSaveStateRemovesCrashTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	old := time.Now().Add(-time.Hour)
	for name, age := range map[string]*time.Time{
		".state.json.123456789": &old, // a crash's leftover
		".state.json.42":        nil,  // a save in flight
		".state.json.bak":       &old, // not ours
		".other.json.123":       &old, // another file's
	} {
		p := testbed.WriteFile(t, dir, name, "{")
		if age != nil {
			if err := os.Chtimes(p, *age, *age); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := probe.SaveState(path, sampleRanking()); err != nil {
		t.Fatal(err)
	}
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := []string{".other.json.123", ".state.json.42", ".state.json.bak", "state.json"}; !slices.Equal(left, want) {
		t.Fatalf("files after the save: %v, want %v", left, want)
	}
}

// TestLoadStateRefusesFIFO: a state file that is a FIFO is refused at
// once, naming it, rather than blocking the agent's start.
func TestLoadStateRefusesFIFO(t *testing.T) {
	testbed.RefusesFIFO(t, "state.json", func(path string) error { _, err := probe.LoadState(path); return err })
}
