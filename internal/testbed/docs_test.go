package testbed_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestDocLinks keeps the operator's documents connected: every relative
// link of README.md and docs/*.md names a file that exists, README.md links
// every docs/ file, and it shows the two commands .ci/run and the README
// promise.
func TestDocLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	readme := testbed.Doc(t, "README.md")
	names := []string{"README.md"}
	for _, d := range docs {
		names = append(names, filepath.ToSlash(filepath.Join("docs", filepath.Base(d))))
	}
	for _, rel := range names {
		text := testbed.Doc(t, rel)
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.Dir(rel), target)); err != nil {
				t.Errorf("%s links %s, which does not exist", rel, target)
			}
		}
		if rel != "README.md" && !strings.Contains(readme, "]("+rel+")") {
			t.Errorf("README.md does not link %s", rel)
		}
	}
	if !strings.Contains(readme, "```sh\nmake demo ") || !strings.Contains(readme, "\nmake test ") {
		t.Errorf("README.md does not show the two commands, make demo and make test")
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil || !strings.HasSuffix(string(ci), "\nmake test\n") {
		t.Errorf(".ci/run does not end with make test: %v", err)
	}
}
