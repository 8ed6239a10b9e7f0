package sbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLookPath finds a program in an sbin directory that PATH lacks, and
// names a missing one.
func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "edgefleet-sbin-test")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	was := dirs
	dirs = []string{t.TempDir(), dir}
	defer func() { dirs = was }()
	if p, err := LookPath("edgefleet-sbin-test"); err != nil || p != prog {
		t.Fatalf("LookPath = %q, %v; want %q", p, err, prog)
	}
	if _, err := LookPath("edgefleet-no-such-program"); err == nil || !strings.Contains(err.Error(), "edgefleet-no-such-program: not found") {
		t.Fatalf("missing program: err = %v", err)
	}
}
