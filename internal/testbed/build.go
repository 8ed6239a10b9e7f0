package testbed

import (
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
)

// builds holds the binaries Build made in this test process, one each.
var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]*build
}

type build struct {
	once sync.Once
	path string
	err  error
}

// Build builds the command pkg (an import path, e.g.
// github.com/edgefleet/edgefleet/cmd/edge) once per test process, static
// (CGO_ENABLED=0: it also runs in a namespace or a container), and returns
// the binary's path. The binaries share one temporary directory; a
// TestMain that wants it gone calls RemoveBuilds after m.Run.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	builds.mu.Lock()
	if builds.bins == nil {
		builds.bins = map[string]*build{}
	}
	b := builds.bins[pkg]
	if b == nil {
		b = &build{}
		builds.bins[pkg] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() {
		builds.mu.Lock()
		if builds.dir == "" {
			builds.dir, b.err = os.MkdirTemp("", "edgefleet-bin-")
		}
		dir := builds.dir
		builds.mu.Unlock()
		if b.err != nil {
			return
		}
		b.path = filepath.Join(dir, path.Base(pkg))
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = errors.New(string(out))
		}
	})
	if b.err != nil {
		t.Fatalf("go build %s: %v", pkg, b.err)
	}
	return b.path
}

// RemoveBuilds removes what Build made.
func RemoveBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
}

// Main is the TestMain of a package whose tests Build commands: it runs
// the tests, removes the binaries and exits with the tests' status.
func Main(m *testing.M) {
	code := m.Run()
	RemoveBuilds()
	os.Exit(code)
}
