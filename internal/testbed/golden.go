package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// InvalidConfigs loads every testdata/invalid-*.yml with load, which must
// fail, and compares the errors, one line per file, with
// testdata/invalid.golden (rewritten when update is set: the caller's
// -update flag). The configuration tests of the binaries use it, in the
// style of CoreDNS and blackbox_exporter: a table of bad files with their
// exact errors.
func InvalidConfigs(t testing.TB, update bool, load func(path string) error) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "invalid-*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/invalid-*.yml: %v", err)
	}
	var got strings.Builder
	for _, f := range files {
		err := load(f)
		if err == nil {
			t.Errorf("%s: loaded without an error", f)
			continue
		}
		fmt.Fprintf(&got, "%s: %s\n", filepath.Base(f), strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	golden := filepath.Join("testdata", "invalid.golden")
	if update {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got.String() != string(want) {
		t.Fatalf("errors differ from %s (go test -update rewrites it):\n got:\n%s\nwant:\n%s", golden, got.String(), want)
	}
}
