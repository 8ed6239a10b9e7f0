package main

import (
	"net"
	"os/exec"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestCheck: origin --check on a good file prints one line and exits 0
// without listening (the front's port is still free afterwards); on a
// front.listen the kernel cannot bind (":8636" and "[::]:8636", one
// dual-stack socket) it exits 2 with one line naming both.
func TestCheck(t *testing.T) {
	addr := testbed.FreeAddr(t, "127.0.0.1")
	dir := t.TempDir()
	good := testbed.WriteFile(t, dir, "good.yaml", "front:\n  listen: ['"+addr+"']\n  inner: 127.0.0.1:1636\ncore: {enabled: false}\nmetrics: ''\npeers_api: ''\n")
	out, err := exec.Command(buildOrigin(t), "--config", good, "--check").CombinedOutput()
	if want := "origin: configuration ok (front [" + addr + "], inner 127.0.0.1:1636)\n"; err != nil || string(out) != want {
		t.Fatalf("origin --check: %v, %q; want %q", err, out, want)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s is taken after --check: %v", addr, err)
	}
	ln.Close()

	bad := testbed.WriteFile(t, dir, "bad.yaml", "front:\n  listen: [\":8636\", \"[::]:8636\"]\n  inner: 127.0.0.1:1636\ncore: {enabled: false}\n")
	cmd := exec.Command(buildOrigin(t), "--config", bad, "--check")
	out, err = cmd.CombinedOutput()
	want := `origin: front.listen: ":8636" and "[::]:8636" are the same socket: a wildcard listens on IPv4 and IPv6 at once (give one of them)` + "\n"
	if err == nil || cmd.ProcessState.ExitCode() != 2 || string(out) != want {
		t.Fatalf("origin --check on an overlap: %v, exit %d, %q; want exit 2 and %q", err, cmd.ProcessState.ExitCode(), out, want)
	}
}
