package testbed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Doc returns the text of an operator document, named from the repository
// root ("docs/edge.md", "README.md"), so that a test can check the examples
// the document shows.
func Doc(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(DocPath(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// DocPath is the file name of a document named from the repository root,
// for a test that regenerates part of it (-update).
func DocPath(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, name)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the test's directory: cannot find %s", name)
		}
		dir = parent
	}
}

// DocBlocks returns the fenced code blocks of an operator document (see
// Doc) whose info string is lang ("yaml", "jsonc", "" for a bare ```), in
// order, without their fences. A document without one fails the test: the
// example the test was written for is gone.
func DocBlocks(t testing.TB, name, lang string) []string {
	t.Helper()
	var blocks []string
	var cur []string
	in, want := false, false
	for line := range strings.Lines(Doc(t, name)) {
		line = strings.TrimSuffix(line, "\n")
		switch {
		case !in && strings.HasPrefix(line, "```"):
			in, want, cur = true, strings.TrimPrefix(line, "```") == lang, nil
		case in && line == "```":
			if want {
				blocks = append(blocks, strings.Join(cur, "\n")+"\n")
			}
			in = false
		case in:
			cur = append(cur, line)
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("%s has no ```%s block", name, lang)
	}
	return blocks
}
