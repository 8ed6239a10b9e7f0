package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		{`{"version":2,"edges":{}}`, "version 2: want 1"},
		{`{"version":1,"edges":{"e1":{"state":"gone","ipv4":"192.0.2.1"}}}`, `edge "e1": state "gone" is not new, active, draining or failed`},
		{`{"version":1,"edges":{"e1":{"state":"active","ipv4":"192.0.2"}}}`, `edge "e1": "192.0.2" is not an IP address`},
		{`{"version":1,"edges":{},"extra":1}`, `unknown field "extra"`},
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
	if _, err := LockState(path); err == nil || !strings.Contains(err.Error(), "another fleet apply or rotate is running") {
		t.Fatalf("second lock: %v", err)
	}
	unlock()
	unlock2, err := LockState(path)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
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
