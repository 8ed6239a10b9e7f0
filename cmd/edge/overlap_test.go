package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestCheckListenOverlap: edge --check refuses a listen list the kernel
// cannot bind (":636" and "[::]:636" are one dual-stack socket), exit 2
// and one line, where it used to say ok and the start failed with
// "address already in use".
func TestCheckListenOverlap(t *testing.T) {
	path := testbed.WriteFile(t, t.TempDir(), "edge.yaml", "name: e1\nlisten: [\":636\", \"[::]:636\"]\norigins: ['192.0.2.2:8636']\nmetrics: ''\n")
	cmd := exec.Command(edgeBin(t), "--config", path, "--check")
	out, err := cmd.CombinedOutput()
	want := `edge: listen: ":636" and "[::]:636" are the same socket: a wildcard listens on IPv4 and IPv6 at once (give one of them)` + "\n"
	if err == nil || cmd.ProcessState.ExitCode() != 2 || string(out) != want {
		t.Fatalf("edge --check: %v, exit %d, %q; want exit 2 and %q", err, cmd.ProcessState.ExitCode(), out, want)
	}
	if strings.Count(string(out), "\n") != 1 {
		t.Fatalf("more than one line: %q", out)
	}
}
