package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"golang.org/x/crypto/ssh"
)

// binaries builds fleet and edge once per test run.
func binaries(t *testing.T) (fleet, edge string) {
	t.Helper()
	return testbed.Build(t, "github.com/edgefleet/edgefleet/cmd/fleet"), testbed.Build(t, "github.com/edgefleet/edgefleet/cmd/edge")
}

const deployYAML = `name: ldap.example.net
zone: example.net
origin: {ports: [8636], address: 192.0.2.2}
deploy:
  binary_url: https://downloads.example.net/edgefleet/v1.0.0/edge-linux-amd64
  binary_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
edges:
  - {name: edge-1, ipv4: 203.0.113.10, ssh: "root@203.0.113.10", host_key: "ssh-ed25519 AAAA"}
`

// runFleet runs the fleet command in process and returns its stdout.
func runFleet(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newRoot()
	cmd.SetOut(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// TestDeployRender: user-data on stdout, or the three files with --out.
func TestDeployRender(t *testing.T) {
	dir := t.TempDir()
	cfg := testbed.WriteFile(t, dir, "fleet.yaml", deployYAML)
	out, err := runFleet(t, "--config", cfg, "deploy", "render", "edge-1")
	if err != nil || !strings.HasPrefix(out, "#cloud-config\n") || !strings.Contains(out, `name: "edge-1"`) {
		t.Fatalf("render: %v\n%s", err, out)
	}
	outDir := filepath.Join(dir, "out")
	msg, err := runFleet(t, "--config", cfg, "deploy", "render", "edge-1", "--out", outDir)
	if err != nil {
		t.Fatal(err)
	}
	ud, _ := os.ReadFile(filepath.Join(outDir, "user-data"))
	if string(ud) != out || !strings.HasPrefix(msg, "wrote "+outDir+": user-data (") {
		t.Fatalf("--out wrote %d bytes of user-data (stdout had %d); said %q", len(ud), len(out), msg)
	}
	for _, name := range []string{"edge.yaml", "edgefleet-edge.service"} {
		if _, err := os.Stat(filepath.Join(outDir, name)); err != nil {
			t.Error(err)
		}
	}
	if _, err := runFleet(t, "--config", cfg, "deploy", "render", "edge-7"); err == nil || err.Error() != `edge "edge-7" is not in the inventory` {
		t.Fatalf("unknown edge: %v", err)
	}
	bad := testbed.WriteFile(t, dir, "bad.yaml", strings.Replace(deployYAML, "binary_sha256", "binary_sha", 1))
	if _, err := runFleet(t, "--config", bad, "deploy", "render", "edge-1"); err == nil || !strings.Contains(err.Error(), `unknown key "deploy.binary_sha"`) {
		t.Fatalf("unknown key: %v", err)
	}
}

// TestDeployPush runs the fleet binary in the edge host's network
// namespace against a real sshd there: with a key file, then through a
// real ssh-agent, then with a changed host key (exit 1, one line, nothing
// new on the host).
func TestDeployPush(t *testing.T) {
	testbed.Need(t, "ssh-agent", "ssh-add")
	fleet, edge := binaries(t)
	ns := testbed.NewNetns(t, "edgevm")
	sshd := testbed.StartSSHD(t, ns, "127.0.0.1:22")
	systemctl := testbed.NewStandIn(t, sshd.Bin, "systemctl")
	dir, root := t.TempDir(), t.TempDir()
	hostKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshd.HostKey)))
	inventory := func(hostKey, identity string) string {
		y := strings.Replace(deployYAML, `ssh: "root@203.0.113.10", host_key: "ssh-ed25519 AAAA"`,
			`ssh: "root@`+sshd.Addr+`", host_key: "`+hostKey+`"`, 1)
		y = strings.Replace(y, "  binary_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n",
			"  binary: "+edge+"\n  identity: "+identity+"\n", 1)
		return testbed.WriteFile(t, dir, "fleet.yaml", y)
	}
	push := func(env ...string) (string, string, int) {
		cmd := ns.Command(fleet, "--config", filepath.Join(dir, "fleet.yaml"), "deploy", "push", "edge-1", "--root", root)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Run()
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}

	inventory(hostKey, sshd.ClientKeyFile)
	out, errOut, code := push()
	if code != 0 || !strings.HasPrefix(out, "edge-1: installed edge-") || !strings.Contains(out, "(first install; binary uploaded), edgefleet-edge.service restarted") {
		t.Fatalf("push with a key file: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("fleet deploy push: %s", out)

	sock := filepath.Join(t.TempDir(), "agent.sock")
	testbed.Start(t, "ssh-agent", "-D", "-a", sock)
	deadline := time.Now().Add(10 * time.Second)
	for {
		add := exec.Command("ssh-add", sshd.ClientKeyFile)
		add.Env = []string{"SSH_AUTH_SOCK=" + sock}
		o, err := add.CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ssh-add: %v\n%s", err, o)
		}
		time.Sleep(50 * time.Millisecond)
	}
	inventory(hostKey, "")
	// The same files again: the running edge is left alone.
	calls := systemctl.Calls()
	if out, errOut, code = push("SSH_AUTH_SOCK=" + sock); code != 0 || !strings.Contains(out, "already installed with this configuration and unit; edgefleet-edge.service not restarted") {
		t.Fatalf("push through the agent: exit %d\n%s%s", code, out, errOut)
	}
	if got := systemctl.Calls()[len(calls):]; slices.Contains(got, "restart edgefleet-edge.service") {
		t.Fatalf("an identical push restarted the edge: systemctl %q", got)
	}
	if out, errOut, code = push(); code != 2 || !strings.Contains(errOut, "no SSH credentials") {
		t.Fatalf("push without credentials: exit %d\n%s%s", code, out, errOut)
	}

	files := func() []string {
		var names []string
		filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error { names = append(names, p); return nil })
		return names
	}
	before := files()
	calls = systemctl.Calls()
	other := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(testbed.NewSSHKey(t))))
	inventory(other, sshd.ClientKeyFile)
	out, errOut, code = push()
	if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "host key mismatch") {
		t.Fatalf("push to a changed host key: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("changed host key: %s", errOut)
	if after := files(); strings.Join(after, " ") != strings.Join(before, " ") || len(systemctl.Calls()) != len(calls) {
		t.Fatalf("the refused push changed the host: %v → %v, systemctl %v", before, after, systemctl.Calls())
	}
}

// TestDocDeployExample: the fleet.yaml of docs/dns-deploy.md loads,
// validates and renders edge-1 with the size the page shows.
func TestDocDeployExample(t *testing.T) {
	var example string
	for _, b := range testbed.DocBlocks(t, "docs/dns-deploy.md", "yaml") {
		if strings.Contains(b, "\ndeploy:\n") {
			example = b
		}
	}
	if example == "" {
		t.Fatal("docs/dns-deploy.md has no fleet.yaml example with a deploy: section")
	}
	cfg := testbed.WriteFile(t, t.TempDir(), "fleet.yaml", example)
	msg, err := runFleet(t, "--config", cfg, "deploy", "render", "edge-1", "--out", filepath.Join(t.TempDir(), "edge-1"))
	if err != nil {
		t.Fatalf("the example does not render: %v", err)
	}
	size := msg[strings.Index(msg, "user-data ("):strings.Index(msg, " bytes)")]
	if doc := testbed.Doc(t, "docs/dns-deploy.md"); !strings.Contains(doc, size+" bytes)") {
		t.Fatalf("the page does not show the rendered size: render said %q", msg)
	}
}
