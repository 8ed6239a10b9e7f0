package deploy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestStateFile: saved atomically and read back; a missing file is an
// empty state; a corrupt one is an error naming the file and the line, and
// is left as it was.
func TestStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), StateFile)
	st, err := LoadState(path)
	if err != nil || len(st.Edges) != 0 {
		t.Fatalf("missing file: %v %v", st, err)
	}
	st.Edges["e1"] = &EdgeState{IPv4: "192.0.2.1", State: StateDraining, LeftDNS: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC), TTL: 60}
	if err := st.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadState(path)
	if err != nil || string(back.Marshal()) != string(st.Marshal()) {
		t.Fatalf("read back: %v\n%s", err, back.Marshal())
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*")); len(m) > 0 {
		t.Errorf("temp files left: %q", m)
	}
	for _, tc := range []struct{ content, want string }{
		{"{\"version\":1,\n\"edges\":{\n\"e1\":{\"state\":\"active\",\"ipv4\":\"192.0.2.1\"},,\n}}", "line 3: invalid character ','"},
		{`{"version":3,"edges":{}}`, "version 3: want 1 or 2"},
		{`{"version":1,"edges":{"e1":{"state":"gone","ipv4":"192.0.2.1"}}}`, `edge "e1": state "gone" is not new, active, draining or failed`},
		{`{"version":1,"edges":{"e1":{"state":"active","ipv4":"192.0.2"}}}`, `edge "e1": "192.0.2" is not an IP address`},
		{`{"version":1,"edges":{},"extra":1}`, `unknown field "extra"`},
		{`{"version":2,"edges":{},"withdrawn":{"e3":{"ipv4":"192.0.2.3","since":"2026-12-01T06:00:00Z","reason":"x","rechecking":true,"firewalled_out":"2026-12-01T06:01:00Z"}}}`,
			`withdrawn "e3": rechecking and firewalled out at once`},
		{`{"version":2,"edges":{},"withdrawn":{"e3":{"ipv4":"192.0.2.3","since":"2026-12-01T06:00:00Z","reason":"x","failed_rechecks":-1}}}`,
			`withdrawn "e3": failed_rechecks -1 is negative`},
	} {
		os.WriteFile(path, []byte(tc.content), 0o600)
		_, err := LoadState(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: err = %v, want one line naming the file and %q", tc.content, err, tc.want)
		}
		if b, _ := os.ReadFile(path); string(b) != tc.content {
			t.Errorf("the corrupt file was changed")
		}
	}
}

// TestLockState: a second lock on the same state fails with one line
// until the first is released.
func TestLockState(t *testing.T) {
	path := filepath.Join(t.TempDir(), StateFile)
	unlock, err := LockState(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LockState(path); err == nil || !strings.Contains(err.Error(), "is running on this inventory") {
		t.Fatalf("second lock: %v", err)
	}
	if _, err := TryLockState(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("try while held: %v", err)
	}
	unlock()
	unlock2, err := LockState(path)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	// A lock held for a moment (a watch round) is waited for.
	released := make(chan struct{})
	go func() {
		<-released
		unlock2()
	}()
	close(released)
	unlock3, err := LockState(path)
	if err != nil {
		t.Fatalf("a lock released while waiting: %v", err)
	}
	unlock3()
}

// TestDocStateFile: the state file shown in docs/dns-deploy.md parses.
func TestDocStateFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "dns-deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```json\n")
	doc, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/dns-deploy.md shows no state file")
	}
	st, err := ParseState([]byte(doc))
	if err != nil || st.Edges["e1"].State != StateDraining || st.Edges["e1"].TTL != 3 {
		t.Fatalf("the documented state file: %v", err)
	}
	if string(st.Marshal()) != doc {
		t.Errorf("the documented state file is not what Marshal writes:\n%s", st.Marshal())
	}
}

// TestStateLongNameRoundTrip: an edge with a name of the longest length
// re-addressed twice drains under names that fit, and the state written
// then reads back.
func TestStateLongNameRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), StateFile)
	long := strings.Repeat("e", 61)
	cfg := validConfig()
	st := NewState()
	st.Edges[long] = &EdgeState{IPv4: "192.0.2.1", State: StateActive}
	st.Edges[long[:59]+".old"] = &EdgeState{IPv4: "192.0.2.9", State: StateDraining}
	cfg.Edges = []Edge{{Name: long, IPv4: "192.0.2.2"}}
	Reconcile(cfg, st, RRSet{A: addrs("192.0.2.1", "192.0.2.9")}, nil)
	if len(st.Edges) != 3 {
		t.Fatalf("state: %s", st.Marshal())
	}
	if err := st.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadState(path)
	if err != nil {
		t.Fatalf("the state fleet wrote does not read back: %v\n%s", err, st.Marshal())
	}
	if string(back.Marshal()) != string(st.Marshal()) {
		t.Errorf("read back:\n%s\nwant:\n%s", back.Marshal(), st.Marshal())
	}
	for name := range back.Edges {
		if len(name) > maxEdgeName {
			t.Errorf("%q: %d characters", name, len(name))
		}
	}
}

// TestStateAdopt: a state names its inventory; one of another inventory
// (name, zone or origin ports) is refused with one line naming both; a
// state without a name (version 1) or without edges is adopted.
func TestStateAdopt(t *testing.T) {
	cfg := validConfig()
	st := NewState()
	st.Edges["e1"] = &EdgeState{IPv4: "192.0.2.1", State: StateActive}
	if err := st.Adopt(cfg, "fleet.state.json"); err != nil || st.Inventory.Name != "ldap.example.net" {
		t.Fatalf("adopt a state naming none: %v %+v", err, st.Inventory)
	}
	for _, other := range []func(*Config){
		func(c *Config) { c.Name = "ldap2.example.net" },
		func(c *Config) { c.Zone = "ldap.example.net" },
		func(c *Config) { c.Origin.Ports = []int{9636} },
	} {
		c := validConfig()
		other(&c)
		err := st.Adopt(c, "fleet.state.json")
		if err == nil || !strings.Contains(err.Error(), "belongs to another inventory (name ldap.example.net, zone example.net, origin ports [8636])") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: err = %v", IDOf(c), err)
		}
	}
	empty := NewState()
	empty.Inventory = IDOf(cfg)
	c := validConfig()
	c.Origin.Ports = []int{9636}
	if err := empty.Adopt(c, "fleet.state.json"); err != nil || empty.Inventory.Ports[0] != 9636 {
		t.Errorf("an empty state: %v", err)
	}
	v1, err := ParseState([]byte(`{"version":1,"edges":{"e1":{"state":"active","ipv4":"192.0.2.1"}}}`))
	if err != nil || v1.Adopt(cfg, "x") != nil || v1.Version != 2 {
		t.Errorf("a version 1 state: %v %+v", err, v1)
	}
}

// TestWriteThroughSymlink: a symlinked file is written through the link
// (the target changes, the link stays), and RemoveTemps deletes the temp
// files a killed writer left beside the target.
func TestWriteThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	checkout := filepath.Join(dir, "checkout")
	os.Mkdir(checkout, 0o700)
	target := filepath.Join(checkout, "fleet.yaml")
	os.WriteFile(target, []byte("old\n"), 0o640)
	link := filepath.Join(dir, "fleet.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(checkout, ".fleet.yaml.tmp123")
	os.WriteFile(stale, []byte("half"), 0o600)
	if err := WriteFileAtomic(link, []byte("new\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(target); string(b) != "new\n" {
		t.Errorf("the target holds %q", b)
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o640 {
		t.Errorf("the target's mode is %v, want 0640 kept", fi.Mode().Perm())
	}
	RemoveTemps(link)
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("the stale temp file is still there")
	}
	if b, _ := os.ReadFile(target); string(b) != "new\n" {
		t.Errorf("RemoveTemps touched the file itself: %q", b)
	}
}

// TestFilesRefuseWhatIsNoFile: the state file, the ticket keys' master
// copy and a TSIG secret_file that are a FIFO (which would block a plain
// read for ever: fleet holding its lock) are refused at once, naming
// what they are, and so is a state file over its bound.
func TestFilesRefuseWhatIsNoFile(t *testing.T) {
	testbed.RefusesFIFO(t, StateFile, func(p string) error { _, err := LoadState(p); return err })
	testbed.RefusesFIFO(t, "tickets.master", func(p string) error { _, err := ReadTicketMaster(p); return err })
	testbed.RefusesFIFO(t, "tsig.key", func(p string) error { _, err := (TSIG{SecretFile: p}).LoadSecret(); return err })
	big := filepath.Join(t.TempDir(), StateFile)
	if err := os.WriteFile(big, make([]byte, 4<<20+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadState(big); err == nil || !strings.Contains(err.Error(), "more than 4194304") {
		t.Errorf("a state file over 4 MiB: %v", err)
	}
}
