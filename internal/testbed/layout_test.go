package testbed_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestPackageMap: docs/architecture.md's package map is the tree as ls
// shows it. Its first column names existing directories in ls order;
// every top-level directory is a row (or the start of one); every
// directory holding Go files is a row or named in one.
func TestPackageMap(t *testing.T) {
	root := filepath.Join("..", "..")
	text := testbed.Doc(t, "docs/architecture.md")
	_, sec, _ := strings.Cut(text, "\n## The packages\n")
	sec, _, _ = strings.Cut(sec, "\n## ")
	tick := regexp.MustCompile("`([^`]+)`")
	var rows []string // the first column's paths, in order
	named := map[string]bool{}
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		for _, m := range tick.FindAllStringSubmatch(cells[1], -1) {
			p := strings.TrimSuffix(m[1], "/")
			rows = append(rows, p)
			named[p] = true
		}
		for _, m := range tick.FindAllStringSubmatch(line, -1) {
			named[strings.TrimSuffix(m[1], "/")] = true
		}
	}
	if len(rows) == 0 {
		t.Fatal("docs/architecture.md has no package map under \"## The packages\"")
	}
	for _, p := range rows {
		if fi, err := os.Stat(filepath.Join(root, p)); err != nil || !fi.IsDir() {
			t.Errorf("the package map names %s, which is not a directory", p)
		}
	}
	if !slices.IsSorted(rows) {
		t.Errorf("the package map is not in ls order: %q", rows)
	}
	top, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	// Directories .gitignore keeps out of the tree (bin/, what make
	// build and make lint write) are not part of the layout.
	ignored := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if n, ok := strings.CutPrefix(strings.TrimSpace(l), "/"); ok && strings.HasSuffix(n, "/") && !strings.Contains(strings.TrimSuffix(n, "/"), "/") {
				ignored[strings.TrimSuffix(n, "/")] = true
			}
		}
	}
	for _, e := range top {
		if ignored[e.Name()] {
			continue
		}
		under := slices.ContainsFunc(rows, func(p string) bool { return strings.HasPrefix(p, e.Name()+"/") })
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !named[e.Name()] && !under {
			t.Errorf("ls shows %s/, which the package map does not list", e.Name())
		}
	}
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata") {
			return filepath.SkipDir
		}
		gofiles, _ := filepath.Glob(filepath.Join(path, "*.go"))
		rel, _ := filepath.Rel(root, path)
		if len(gofiles) > 0 && rel != "." && !named[filepath.ToSlash(rel)] {
			t.Errorf("%s holds Go files and the package map does not name it", rel)
		}
		return nil
	})
}
