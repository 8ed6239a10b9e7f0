package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"golang.org/x/crypto/ssh"
)

// edgeHost is an edge VM stand-in: sshd in its own network namespace,
// systemctl replaced by a recorder, and a root prefix the push writes
// under.
type edgeHost struct {
	sshd      *testbed.SSHD
	systemctl *testbed.StandIn
	root      string
}

func newEdgeHost(t *testing.T) *edgeHost {
	t.Helper()
	ns := testbed.NewNetns(t, "edgevm")
	sshd := testbed.StartSSHD(t, ns, "127.0.0.1:22")
	return &edgeHost{sshd: sshd, systemctl: testbed.NewStandIn(t, sshd.Bin, "systemctl"), root: t.TempDir()}
}

// push pushes binary to the host with the inventory edited by edit.
func (h *edgeHost) push(t *testing.T, binary string, edit func(*Config)) (PushResult, error) {
	t.Helper()
	c := deployConfig()
	c.Edges[0].SSH = "root@" + h.sshd.Addr
	c.Edges[0].HostKey = string(ssh.MarshalAuthorizedKey(h.sshd.HostKey))
	c.Deploy.BinarySHA256 = ""
	c.Deploy.Binary = binary
	if edit != nil {
		edit(&c)
	}
	p, err := NewPush(c, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	p.Auth = []ssh.AuthMethod{ssh.PublicKeys(h.sshd.Client)}
	p.Root = h.root
	p.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) { return h.sshd.Dial(network, addr) }
	return Push(context.Background(), p)
}

// file is a remote file's content, mode and owner.
type file struct {
	content  string
	mode     fs.FileMode
	uid, gid uint32
}

func (h *edgeHost) file(t *testing.T, path string) file {
	t.Helper()
	p := filepath.Join(h.root, path)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	sys := st.Sys().(*syscall.Stat_t)
	return file{string(b), st.Mode(), sys.Uid, sys.Gid}
}

// tree lists every path under the host's root.
func (h *edgeHost) tree(t *testing.T) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(h.root, func(p string, d fs.DirEntry, err error) error {
		if p != h.root {
			out = append(out, strings.TrimPrefix(p, h.root))
		}
		return nil
	})
	return out
}

func (h *edgeHost) link(t *testing.T) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(h.root, BinLink))
	if err != nil {
		t.Fatal(err)
	}
	return target
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// variant writes a copy of the edge binary with bytes appended: another
// version (another SHA-256) that still runs, as ELF ignores trailing data.
func variant(t *testing.T, tag string) string {
	t.Helper()
	b, err := os.ReadFile(edgeBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "edge")
	if err := os.WriteFile(p, append(b, tag...), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPushInstalls: a first push lands binary, configuration and unit
// with root ownership and their modes, links the binary, reloads and
// restarts through systemctl; a second push of a new version keeps the
// previous binary and configuration beside the new ones.
func TestPushInstalls(t *testing.T) {
	h := newEdgeHost(t)
	v1 := variant(t, "v1")
	res, err := h.push(t, v1, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum1 := sha256File(t, v1)
	if res.Installed != "edge-"+sum1 || res.Previous != "" || !res.Uploaded {
		t.Fatalf("result %+v", res)
	}
	r, _ := Render(deployConfig(), "edge-1")
	want := map[string]file{
		BinDir + "/edge-" + sum1: {mode: 0o755},
		ConfigPath:               {content: string(r.EdgeConfig), mode: 0o644},
		UnitPath:                 {content: string(r.Unit), mode: 0o644},
	}
	for path, w := range want {
		got := h.file(t, path)
		if got.mode != w.mode || got.uid != 0 || got.gid != 0 || (w.content != "" && got.content != w.content) {
			t.Errorf("%s: mode %v owner %d:%d, want %v 0:0 (content equal: %v)", path, got.mode, got.uid, got.gid, w.mode, got.content == w.content)
		}
	}
	if got := h.link(t); got != "../lib/edgefleet/edge-"+sum1 {
		t.Fatalf("link → %s", got)
	}
	if calls := h.systemctl.Calls(); !slices.Equal(calls, []string{"daemon-reload", "restart " + UnitName}) {
		t.Fatalf("systemctl calls %q", calls)
	}
	for _, p := range h.tree(t) {
		if strings.HasSuffix(p, ".new") {
			t.Errorf("left behind: %s", p)
		}
	}

	v2 := variant(t, "v2")
	sum2 := sha256File(t, v2)
	res, err = h.push(t, v2, func(c *Config) { c.Deploy.DrainTimeout = 45 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	if res.Installed != "edge-"+sum2 || res.Previous != "edge-"+sum1 || !res.Uploaded {
		t.Fatalf("second result %+v", res)
	}
	if got := h.link(t); got != "../lib/edgefleet/edge-"+sum2 {
		t.Fatalf("link → %s", got)
	}
	if !strings.Contains(h.file(t, ConfigPath).content, "drain_timeout: 45s") || h.file(t, ConfigPath+".prev").content != string(r.EdgeConfig) {
		t.Fatal("configuration not replaced, or the previous one not kept as .prev")
	}
	h.file(t, BinDir+"/edge-"+sum1) // the previous binary stays for a rollback
	if n := len(h.systemctl.Calls()); n != 4 {
		t.Fatalf("systemctl calls %q, want two more", h.systemctl.Calls())
	}

	// The same version again: nothing to upload, still a restart.
	res, err = h.push(t, v2, nil)
	if err != nil || res.Uploaded || res.Installed != "edge-"+sum2 {
		t.Fatalf("re-push: %+v, %v", res, err)
	}
	// A third version: the oldest binary is pruned, two stay.
	v3 := variant(t, "v3")
	if _, err := h.push(t, v3, nil); err != nil {
		t.Fatal(err)
	}
	bins, _ := filepath.Glob(filepath.Join(h.root, BinDir, "edge-*"))
	if len(bins) != 2 || slices.Contains(bins, filepath.Join(h.root, BinDir, "edge-"+sum1)) {
		t.Fatalf("binaries kept: %v, want v2 and v3", bins)
	}
}

// TestPushRefusesChangedHostKey: a host presenting another key than the
// pinned one gets refused in the handshake, and nothing is written.
func TestPushRefusesChangedHostKey(t *testing.T) {
	h := newEdgeHost(t)
	other := testbed.NewSSHKey(t)
	_, err := h.push(t, variant(t, "v1"), func(c *Config) {
		c.Edges[0].HostKey = "127.0.0.1 " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(other))) // ssh-keyscan's form
	})
	if err == nil || !strings.Contains(err.Error(), "host key mismatch") || !strings.Contains(err.Error(), ssh.FingerprintSHA256(h.sshd.HostKey)) {
		t.Fatalf("push with a changed host key: %v", err)
	}
	t.Log(err)
	if got := h.tree(t); len(got) != 0 {
		t.Fatalf("written on the host: %v", got)
	}
	if calls := h.systemctl.Calls(); len(calls) != 0 {
		t.Fatalf("systemctl called: %v", calls)
	}
}

// TestPushFailedCheckKeepsPrevious: a binary that refuses the configuration
// (here: does not run at all) changes nothing: the link, configuration
// and unit stay, the upload is deleted and the service is not restarted.
func TestPushFailedCheckKeepsPrevious(t *testing.T) {
	h := newEdgeHost(t)
	v1 := variant(t, "v1")
	if _, err := h.push(t, v1, nil); err != nil {
		t.Fatal(err)
	}
	before := map[string]file{}
	for _, p := range []string{ConfigPath, UnitPath} {
		before[p] = h.file(t, p)
	}
	tree, calls := h.tree(t), h.systemctl.Calls()

	broken := filepath.Join(t.TempDir(), "edge")
	os.WriteFile(broken, []byte("#!/bin/sh\necho 'edge: this build is broken' >&2\nexit 2\n"), 0o755)
	_, err := h.push(t, broken, func(c *Config) { c.Deploy.DrainTimeout = time.Minute })
	if err == nil || !strings.Contains(err.Error(), "refused the new configuration, nothing changed: edge: this build is broken") {
		t.Fatalf("push of a broken binary: %v", err)
	}
	t.Log(err)
	if got := h.link(t); got != "../lib/edgefleet/edge-"+sha256File(t, v1) {
		t.Fatalf("link → %s", got)
	}
	for p, f := range before {
		if h.file(t, p) != f {
			t.Errorf("%s changed", p)
		}
	}
	if got := h.tree(t); !slices.Equal(got, tree) {
		t.Fatalf("files now %v, were %v", got, tree)
	}
	if got := h.systemctl.Calls(); !slices.Equal(got, calls) {
		t.Fatalf("systemctl calls now %v, were %v", got, calls)
	}
}

// TestPushFailedRestartRollsBack: when systemctl fails, the previous link,
// configuration and unit are put back and the previous version restarted.
func TestPushFailedRestartRollsBack(t *testing.T) {
	h := newEdgeHost(t)
	v1 := variant(t, "v1")
	if _, err := h.push(t, v1, nil); err != nil {
		t.Fatal(err)
	}
	conf := h.file(t, ConfigPath)
	h.systemctl.FailNext(t, "restart", 1)
	_, err := h.push(t, variant(t, "v2"), func(c *Config) { c.Deploy.DrainTimeout = time.Minute })
	want := "restart failed (systemctl restart: failing as the test asked); rolled back to edge-" + sha256File(t, v1)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("push with a failing systemctl: %v, want %q", err, want)
	}
	if got := h.link(t); got != "../lib/edgefleet/edge-"+sha256File(t, v1) {
		t.Fatalf("link → %s", got)
	}
	if h.file(t, ConfigPath) != conf {
		t.Fatal("configuration not rolled back")
	}
	calls := h.systemctl.Calls()
	want = "daemon-reload|restart " + UnitName
	if got := strings.Join(calls, "|"); got != want+"|"+want+"|"+want { // first push, the failed restart, the rollback
		t.Fatalf("systemctl calls %q", calls)
	}
}

// TestPushUnchangedDoesNotRestart: pushing again exactly what the host
// runs (binary, configuration, unit) with the service active renames
// nothing and does not restart it, which would cut every connection the
// edge holds; with the service not active, the same push restarts it.
func TestPushUnchangedDoesNotRestart(t *testing.T) {
	h := newEdgeHost(t)
	v1 := variant(t, "v1")
	if _, err := h.push(t, v1, nil); err != nil {
		t.Fatal(err)
	}
	tree, calls := h.tree(t), h.systemctl.Calls()
	res, err := h.push(t, v1, nil)
	if err != nil || !res.Unchanged || res.Uploaded || res.Installed != "edge-"+sha256File(t, v1) {
		t.Fatalf("identical push: %+v, %v", res, err)
	}
	got := h.systemctl.Calls()[len(calls):]
	if !slices.Equal(got, []string{"is-active --quiet " + UnitName}) {
		t.Fatalf("identical push: systemctl calls %q, want only is-active", got)
	}
	if now := h.tree(t); !slices.Equal(now, tree) {
		t.Fatalf("identical push changed the host:\n%v\nwas\n%v", now, tree)
	}

	h.systemctl.FailNext(t, "is-active", 1) // the service is down
	calls = h.systemctl.Calls()
	if res, err := h.push(t, v1, nil); err != nil || res.Unchanged {
		t.Fatalf("identical push to a stopped service: %+v, %v", res, err)
	}
	if got := h.systemctl.Calls()[len(calls):]; !slices.Contains(got, "restart "+UnitName) {
		t.Fatalf("a stopped service was not restarted: systemctl calls %q", got)
	}
}

// TestPushFailedRestartSaysWhy: a failed restart's error carries
// systemctl's message and the unit's last log line (journalctl), on one
// line, for the restart of the new version and for the rollback's.
func TestPushFailedRestartSaysWhy(t *testing.T) {
	h := newEdgeHost(t)
	testbed.WriteFile(t, h.sshd.Bin, "journalctl", "#!/bin/sh\necho 'edge: listen [::]:636: bind: address already in use'\n")
	if err := os.Chmod(filepath.Join(h.sshd.Bin, "journalctl"), 0o755); err != nil {
		t.Fatal(err)
	}
	v1 := variant(t, "v1")
	if _, err := h.push(t, v1, nil); err != nil {
		t.Fatal(err)
	}
	h.systemctl.FailNext(t, "restart", 2)
	_, err := h.push(t, variant(t, "v2"), nil)
	why := "systemctl restart: failing as the test asked; the unit's last log line: edge: listen [::]:636: bind: address already in use"
	want := "restart failed (" + why + "); rolled back to edge-" + sha256File(t, v1) + ", which failed to restart too (" + why + ")"
	if err == nil || !strings.HasSuffix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("push with a failing restart: %v\nwant …%s", err, want)
	}
}

// TestPushChecksPin: a local binary that is not the one
// deploy.binary_sha256 pins is refused before any connection.
func TestPushChecksPin(t *testing.T) {
	c := deployConfig()
	c.Edges[0].SSH = "root@192.0.2.99"
	c.Edges[0].HostKey = string(ssh.MarshalAuthorizedKey(testbed.NewSSHKey(t)))
	c.Deploy.Binary = testbed.WriteFile(t, t.TempDir(), "edge", "not the pinned build")
	p, err := NewPush(c, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	p.Dial = func(context.Context, string, string) (net.Conn, error) {
		t.Fatal("dialled despite the wrong binary")
		return nil, nil
	}
	if _, err := Push(context.Background(), p); err == nil || !strings.Contains(err.Error(), "deploy.binary_sha256 pins "+strings.Repeat("ab", 32)) {
		t.Fatalf("Push: %v", err)
	}
}

// TestPushUnreachable: nothing listening is one error naming the address.
func TestPushUnreachable(t *testing.T) {
	c := deployConfig()
	addr := testbed.FreeAddr(t, "127.0.0.1")
	c.Edges[0].SSH = "root@" + addr
	c.Edges[0].HostKey = string(ssh.MarshalAuthorizedKey(testbed.NewSSHKey(t)))
	c.Deploy.BinarySHA256 = ""
	c.Deploy.Binary = testbed.WriteFile(t, t.TempDir(), "edge", "#!/bin/sh\n")
	p, err := NewPush(c, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Push(context.Background(), p)
	if err == nil || !strings.HasPrefix(err.Error(), "edge edge-1: dial "+addr+": ") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Push to a closed port: %v", err)
	}
}

func TestParseSSHTarget(t *testing.T) {
	for _, tc := range []struct{ in, user, addr, err string }{
		{in: "root@203.0.113.10", user: "root", addr: "203.0.113.10:22"},
		{in: "203.0.113.10:2222", user: "root", addr: "203.0.113.10:2222"},
		{in: "admin@edge1.example.net:22", user: "admin", addr: "edge1.example.net:22"},
		{in: "root@2001:db8::10", user: "root", addr: "[2001:db8::10]:22"},
		{in: "root@[2001:db8::10]:2222", user: "root", addr: "[2001:db8::10]:2222"},
		{in: "root@[2001:db8::10]", user: "root", addr: "[2001:db8::10]:22"},
		{in: "root@[edge1]", err: "is not user@host"},
		{in: "root@host:99999", err: "is not user@host"},
		{in: "root@0[::", err: "is not user@host"},
		{in: "", err: `"" is not user@host[:port]`},
		{in: "root@", err: "is not user@host"},
		{in: "@host", err: "is not user@host"},
		{in: "root@host:", err: "is not user@host"},
	} {
		user, addr, err := ParseSSHTarget(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSSHTarget(%q) = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || user != tc.user || addr != tc.addr {
			t.Errorf("ParseSSHTarget(%q) = %q %q %v", tc.in, user, addr, err)
		}
	}
}

func TestParseHostKey(t *testing.T) {
	k := testbed.NewSSHKey(t)
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
	for _, in := range []string{line, line + " root@edge-1", "203.0.113.10 " + line, "[203.0.113.10]:2222,edge-1 " + line} {
		got, err := ParseHostKey(in)
		if err != nil || string(got.Marshal()) != string(k.Marshal()) {
			t.Errorf("ParseHostKey(%q) = %v", in, err)
		}
	}
	for _, in := range []string{"", "ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5", "edge-1 ssh-ed25519 nope"} {
		if _, err := ParseHostKey(in); err == nil {
			t.Errorf("ParseHostKey(%q) accepted", in)
		}
	}
}

func FuzzParseSSHTarget(f *testing.F) {
	for _, s := range []string{"root@203.0.113.10", "root@[2001:db8::10]:2222", "h:1", "@", "a@b@c", "root@2001:db8::1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		user, addr, err := ParseSSHTarget(s)
		if err != nil {
			return
		}
		if user == "" {
			t.Fatalf("%q: empty user", s)
		}
		if h, p, err := net.SplitHostPort(addr); err != nil || h == "" || p == "" {
			t.Fatalf("%q: address %q is not host:port", s, addr)
		}
	})
}

func FuzzParseHostKey(f *testing.F) {
	for _, s := range []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKqDTMzU1Zc8Rj3Lr9k3DEVdkWmXTHQRGz1Yw5ZuJXhY c", "h ssh-ed25519 AAAA", "", "@cert-authority * ssh-rsa AAAA"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseHostKey(s)
		if err == nil && k == nil {
			t.Fatalf("%q: no key and no error", s)
		}
	})
}
