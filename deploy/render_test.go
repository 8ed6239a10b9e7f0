package deploy

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"
)

// deployConfig is validConfig with a deploy section.
func deployConfig() Config {
	c := validConfig()
	c.Deploy.BinaryURL = "https://downloads.example.net/edgefleet/v1.0.0/edge-linux-amd64"
	c.Deploy.BinarySHA256 = strings.Repeat("ab", 32)
	c.Deploy.AuthorizedKeys = []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKqDTMzU1Zc8Rj3Lr9k3DEVdkWmXTHQRGz1Yw5ZuJXhY operator@laptop"}
	return c
}

// TestRenderGolden: the user-data and the unit of edge-1, byte for byte.
func TestRenderGolden(t *testing.T) {
	r, err := Render(deployConfig(), "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "edge-1.user-data", string(r.UserData))
	golden(t, "edge-1.service", string(r.Unit))
	golden(t, "edge-1.edge.yaml", string(r.EdgeConfig))
}

// userData is the part of #cloud-config the tests read back.
type userData struct {
	WriteFiles []struct {
		Path, Owner, Permissions, Content string
	} `yaml:"write_files"`
	Runcmd            [][]string `yaml:"runcmd"`
	SSHAuthorizedKeys []string   `yaml:"ssh_authorized_keys"`
	DisableRoot       *bool      `yaml:"disable_root"`
}

func parseUserData(t *testing.T, b []byte) (userData, map[string]string) {
	t.Helper()
	if !bytes.HasPrefix(b, []byte("#cloud-config\n")) {
		t.Fatalf("user-data does not start with #cloud-config: %.40q", b)
	}
	var u userData
	if err := yaml.Unmarshal(b, &u); err != nil {
		t.Fatalf("user-data is not YAML: %v", err)
	}
	files := map[string]string{}
	for _, f := range u.WriteFiles {
		files[f.Path] = f.Content
	}
	return u, files
}

// TestUserDataCarriesFiles: once YAML-decoded, the user-data writes
// exactly the rendered edge configuration and unit, root-owned, and runs
// install-edge.
func TestUserDataCarriesFiles(t *testing.T) {
	r, err := Render(deployConfig(), "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	u, files := parseUserData(t, r.UserData)
	if files[ConfigPath] != string(r.EdgeConfig) || files[UnitPath] != string(r.Unit) {
		t.Fatalf("write_files differ from the rendered files:\nconfig %q\nunit %q", files[ConfigPath], files[UnitPath])
	}
	for _, f := range u.WriteFiles {
		if f.Owner != "root:root" {
			t.Errorf("%s owner %q", f.Path, f.Owner)
		}
	}
	if len(u.Runcmd) != 1 || len(u.Runcmd[0]) != 1 || u.Runcmd[0][0] != BinDir+"/install-edge" || files[BinDir+"/install-edge"] == "" {
		t.Fatalf("runcmd %v, want install-edge alone", u.Runcmd)
	}
	if u.DisableRoot == nil || *u.DisableRoot || len(u.SSHAuthorizedKeys) != 1 {
		t.Fatalf("disable_root %v, ssh_authorized_keys %v", u.DisableRoot, u.SSHAuthorizedKeys)
	}
	for _, want := range []string{`name: "edge-1"`, `- "192.0.2.2:8636"`, "proxy_protocol: v2", `metrics: "127.0.0.1:9101"`} {
		if !strings.Contains(string(r.EdgeConfig), want) {
			t.Errorf("edge.yaml lacks %q:\n%s", want, r.EdgeConfig)
		}
	}
}

// TestUserDataSize: under the 16 KiB clouds accept, with room to spare for
// an inventory with a dozen authorised keys; past the limit Render fails.
func TestUserDataSize(t *testing.T) {
	c := deployConfig()
	r, err := Render(c, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("user-data: %d bytes (limit %d)", len(r.UserData), MaxUserData)
	if len(r.UserData) >= MaxUserData/2 {
		t.Fatalf("user-data is %d bytes, want well under %d", len(r.UserData), MaxUserData)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := ssh.NewPublicKey(&key.PublicKey)
	rsa := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))) + " operator@laptop"
	for range 12 {
		c.Deploy.AuthorizedKeys = append(c.Deploy.AuthorizedKeys, rsa)
	}
	if r, err = Render(c, "edge-1"); err != nil || len(r.UserData) >= MaxUserData {
		t.Fatalf("with 13 keys: %v, %d bytes", err, len(r.UserData))
	}
	for range 40 {
		c.Deploy.AuthorizedKeys = append(c.Deploy.AuthorizedKeys, rsa)
	}
	if _, err := Render(c, "edge-1"); err == nil || !strings.Contains(err.Error(), "over the 16384-byte limit") {
		t.Fatalf("with 53 keys: err %v, want the size limit", err)
	}
}

func TestRenderErrors(t *testing.T) {
	for _, tc := range []struct {
		name, edge, want string
		edit             func(*Config)
	}{
		{name: "unknown edge", edge: "edge-9", want: `edge "edge-9" is not in the inventory`},
		{name: "no url", edit: func(c *Config) { c.Deploy.BinaryURL = "" }, want: "deploy.binary_url: required"},
		{name: "ftp url", edit: func(c *Config) { c.Deploy.BinaryURL = "ftp://x/edge" }, want: `deploy.binary_url: "ftp://x/edge" is not an http(s) URL`},
		{name: "no sha", edit: func(c *Config) { c.Deploy.BinarySHA256 = "" }, want: `deploy.binary_sha256: "" is not a SHA-256`},
		{name: "short sha", edit: func(c *Config) { c.Deploy.BinarySHA256 = "abcd" }, want: `deploy.binary_sha256: "abcd" is not a SHA-256`},
		{name: "bad key", edit: func(c *Config) { c.Deploy.AuthorizedKeys = []string{"ssh-ed25519 nope"} }, want: "deploy.authorized_keys[0]: not an SSH public key"},
		{name: "no origin", edit: func(c *Config) { c.Origin.Address = "" }, want: "deploy.origins: required when origin.address is empty"},
		{name: "bad metrics", edit: func(c *Config) { c.Deploy.Metrics = "9101" }, want: `deploy.metrics: "9101" is not host:port`},
		{name: "listen overlap", edit: func(c *Config) { c.Deploy.Listen = []string{":636", "[::]:636"} }, want: `deploy.listen: ":636" and "[::]:636" are the same socket`},
		{name: "bad listen", edit: func(c *Config) { c.Deploy.Listen = []string{"636"} }, want: `edge edge-1 configuration: listen: "636" is not host:port`},
		{name: "bad origins", edit: func(c *Config) { c.Deploy.Origins = []string{"origin"} }, want: `edge edge-1 configuration: origins: "origin" is not host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := deployConfig()
			if tc.edit != nil {
				tc.edit(&c)
			}
			edge := tc.edge
			if edge == "" {
				edge = "edge-1"
			}
			_, err := Render(c, edge)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestRenderOrigins: deploy.origins overrides origin.address and ports.
func TestRenderOrigins(t *testing.T) {
	c := deployConfig()
	c.Origin.Ports = []int{8636, 636}
	r, err := Render(c, "edge-2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(r.EdgeConfig), "origins:\n  - \"192.0.2.2:8636\"\n  - \"192.0.2.2:636\"\n") {
		t.Fatalf("edge.yaml:\n%s", r.EdgeConfig)
	}
	c.Deploy.Origins = []string{"origin.example.net:8636"}
	c.Origin.Address = ""
	if r, err = Render(c, "edge-2"); err != nil || !strings.Contains(string(r.EdgeConfig), "origins:\n  - \"origin.example.net:8636\"\n") {
		t.Fatalf("%v\n%s", err, r.EdgeConfig)
	}
}

// TestCloudInitSchema: cloud-init itself accepts the user-data.
func TestCloudInitSchema(t *testing.T) {
	testbed.Need(t, "cloud-init")
	r, err := Render(deployConfig(), "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	path := testbed.WriteFile(t, t.TempDir(), "user-data", string(r.UserData))
	out, err := exec.Command(must(testbed.Path("cloud-init")), "schema", "--config-file", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Valid cloud-config") {
		t.Fatalf("cloud-init schema: %v\n%s", err, out)
	}
}

func must(p string, err error) string {
	if err != nil {
		return "missing"
	}
	return p
}

// inUnitNamespace runs systemd-analyze on the unit in a private mount
// namespace where a stand-in executable sits at the unit's ExecStart path
// (a tmpfs over /usr/local/bin), so verify finds every command without
// anything written to the machine's /usr.
func inUnitNamespace(t *testing.T, unit []byte, args ...string) ([]byte, error) {
	t.Helper()
	testbed.NeedRoot(t)
	testbed.Need(t, "systemd-analyze", "unshare")
	dir := t.TempDir()
	path := testbed.WriteFile(t, dir, UnitName, string(unit))
	script := "mount -t tmpfs tmpfs " + filepath.Dir(BinLink) + " && cp /bin/true " + BinLink + " && exec systemd-analyze " +
		strings.Join(args, " ") + " " + path
	return exec.Command(must(testbed.Path("unshare")), "--mount", "--propagation", "private", "sh", "-c", script).CombinedOutput()
}

// TestUnitVerify: systemd-analyze verify accepts the unit and the unit
// has the hardening docs/dns-deploy.md describes.
func TestUnitVerify(t *testing.T) {
	r, err := Render(deployConfig(), "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DynamicUser=yes", "CapabilityBoundingSet=CAP_NET_BIND_SERVICE\n", "AmbientCapabilities=CAP_NET_BIND_SERVICE\n",
		"ProtectSystem=strict", "ProtectHome=yes", "NoNewPrivileges=yes", "PrivateTmp=yes", "Restart=always", "LimitNOFILE=1048576"} {
		if !strings.Contains(string(r.Unit), want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	if out, err := inUnitNamespace(t, r.Unit, "verify"); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestUnitSecurity: systemd-analyze security rates the unit's exposure
// (0 best, 10 worst) at most 2.0; the figure is logged.
func TestUnitSecurity(t *testing.T) {
	r, err := Render(deployConfig(), "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	out, err := inUnitNamespace(t, r.Unit, "security", "--offline=yes", "--no-pager")
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(UnitName) + `: ([0-9.]+) (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("systemd-analyze security: exposure %.1f %s", score, m[2])
	if score > 2.0 {
		t.Fatalf("exposure %.1f, want at most 2.0:\n%s", score, out)
	}
}

// execStartPre is the unit's ExecStartPre as the words systemd would pass
// to execve: one single-quoted word (the sh script, $$ unescaped to $)
// among plain ones.
func execStartPre(t *testing.T, unit []byte) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^ExecStartPre=(\S+) (\S+) '([^']*)' (.*)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatalf("no ExecStartPre of the expected shape in:\n%s", unit)
	}
	words := []string{string(m[1]), string(m[2]), strings.ReplaceAll(string(m[3]), "$$", "$")}
	return append(words, strings.Fields(string(m[4]))...)
}

// TestExecStartPreRefusesTampering: the unit's start check passes for a
// binary whose content matches its edge-<sha256> name and fails for one
// changed after install.
func TestExecStartPreRefusesTampering(t *testing.T) {
	r, err := Render(deployConfig(), "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	words := execStartPre(t, r.Unit)
	if words[len(words)-1] != BinLink {
		t.Fatalf("ExecStartPre checks %q, want %s", words[len(words)-1], BinLink)
	}
	root := t.TempDir()
	content := []byte("#!/bin/sh\necho edge\n")
	sum := sha256.Sum256(content)
	bin := filepath.Join(root, BinDir, "edge-"+hex.EncodeToString(sum[:]))
	link := filepath.Join(root, BinLink)
	os.MkdirAll(filepath.Dir(bin), 0o755)
	os.MkdirAll(filepath.Dir(link), 0o755)
	os.WriteFile(bin, content, 0o755)
	if err := os.Symlink("../lib/edgefleet/"+filepath.Base(bin), link); err != nil {
		t.Fatal(err)
	}
	check := func() error {
		args := append(append([]string{}, words[1:len(words)-1]...), link)
		return exec.Command(words[0], args...).Run()
	}
	if err := check(); err != nil {
		t.Fatalf("start check of an intact binary: %v", err)
	}
	os.WriteFile(bin, append(content, "# changed\n"...), 0o755)
	var exit *exec.ExitError
	if err := check(); !errors.As(err, &exit) {
		t.Fatalf("start check of a changed binary: %v, want a failure", err)
	}
}

// edgeBinary builds cmd/edge once per test run.
func edgeBinary(t *testing.T) string {
	return testbed.Build(t, "github.com/edgefleet/edgefleet/cmd/edge")
}

func TestMain(m *testing.M) { testbed.Main(m) }

// TestInstallEdge runs the user-data's install-edge script against a root
// prefix, fetching the real edge binary from an HTTP server on loopback:
// the right SHA-256 installs it, links it and starts the unit; a wrong one
// installs nothing and never calls systemctl.
func TestInstallEdge(t *testing.T) {
	testbed.Need(t, "curl")
	bin, err := os.ReadFile(edgeBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(bin) }))
	defer srv.Close()

	for _, tc := range []struct {
		name, sha string
		ok        bool
	}{
		{name: "pinned", sha: hex.EncodeToString(sum[:]), ok: true},
		{name: "wrong sha", sha: strings.Repeat("0", 64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := deployConfig()
			c.Deploy.BinaryURL, c.Deploy.BinarySHA256 = srv.URL+"/edge", tc.sha
			r, err := Render(c, "edge-1")
			if err != nil {
				t.Fatal(err)
			}
			_, files := parseUserData(t, r.UserData)
			root, bindir := t.TempDir(), t.TempDir()
			for path, content := range files { // what write_files does
				os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755)
				os.WriteFile(filepath.Join(root, path), []byte(content), 0o700)
			}
			systemctl := testbed.NewStandIn(t, bindir, "systemctl")
			cmd := exec.Command(filepath.Join(root, BinDir, "install-edge"), root)
			cmd.Env = append(os.Environ(), "PATH="+bindir+":"+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			link := filepath.Join(root, BinLink)
			if !tc.ok {
				if err == nil || !strings.Contains(string(out), "does not have SHA-256 "+tc.sha+"; nothing installed") {
					t.Fatalf("install-edge: %v\n%s", err, out)
				}
				if _, err := os.Lstat(link); !os.IsNotExist(err) {
					t.Fatalf("%s exists after a failed check: %v", link, err)
				}
				if left, _ := filepath.Glob(filepath.Join(root, BinDir, "*edge-*")); len(left) != 0 {
					t.Fatalf("left behind: %v", left)
				}
				if calls := systemctl.Calls(); len(calls) != 0 {
					t.Fatalf("systemctl called: %v", calls)
				}
				return
			}
			if err != nil {
				t.Fatalf("install-edge: %v\n%s", err, out)
			}
			target, err := os.Readlink(link)
			if want := "../lib/edgefleet/edge-" + tc.sha; err != nil || target != want {
				t.Fatalf("%s → %q (%v), want %s", link, target, err, want)
			}
			got, _ := os.ReadFile(link)
			if !bytes.Equal(got, bin) {
				t.Fatal("installed binary differs from the served one")
			}
			if calls := strings.Join(systemctl.Calls(), "; "); calls != "daemon-reload; enable --now "+UnitName {
				t.Fatalf("systemctl calls %q", calls)
			}
		})
	}
}

// TestRenderedEdgeRunsConfined runs the real edge on the rendered
// edge.yaml as the unit does: an unprivileged user with no new privileges
// and CAP_NET_BIND_SERVICE as its only capability (setpriv stands in for
// DynamicUser and the capability sets), in a network namespace. It binds
// :636 and serves its metrics; without the capability it cannot bind.
func TestRenderedEdgeRunsConfined(t *testing.T) {
	testbed.Need(t, "setpriv")
	r, err := Render(deployConfig(), "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	// Readable by the unprivileged user, as /usr/local/lib and /etc are.
	dir, err := os.MkdirTemp("", "deploy-confined-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin, _ := os.ReadFile(edgeBinary(t))
	edge, conf := filepath.Join(dir, "edge"), filepath.Join(dir, "edge.yaml")
	if err := errors.Join(os.Chmod(dir, 0o755), os.WriteFile(edge, bin, 0o755), os.WriteFile(conf, r.EdgeConfig, 0o644)); err != nil {
		t.Fatal(err)
	}
	setpriv := func(caps string) []string {
		return []string{"--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs",
			"--inh-caps=-all" + caps, "--ambient-caps=-all" + caps, "--bounding-set=-all" + caps, edge, "--config", conf}
	}

	ns := testbed.NewNetns(t, "edgerun")
	out, err := ns.Try("setpriv", setpriv("")...)
	if err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("without CAP_NET_BIND_SERVICE: %v\n%s", err, out)
	}
	p := testbed.StartCmd(t, ns.Command(must(testbed.Path("setpriv")), setpriv(",+net_bind_service")...))
	var c net.Conn
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err = ns.Dial("", "127.0.0.1:636", time.Second); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the confined edge does not listen on :636: %v\n%s", err, p.Output())
		}
	}
	c.Close()
	mc, err := ns.Dial("", "127.0.0.1:9101", 5*time.Second)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer mc.Close()
	mc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(mc, "GET /metrics HTTP/1.0\r\n\r\n")
	body, _ := io.ReadAll(mc)
	if !bytes.Contains(body, []byte("edgefleet_edge_connections_total")) {
		t.Fatalf("metrics answer lacks edgefleet_edge_connections_total:\n%.300s", body)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.Output(), `"msg":"edge listening","addr":"[::]:636","name":"edge-1"`); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no JSON 'edge listening' line for edge-1:\n%s", p.Output())
		}
	}
}
