package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/invalid.golden")

// TestInvalidConfigs loads each testdata/invalid-*.yml (CoreDNS and
// blackbox_exporter style): the error must be exactly the one in
// testdata/invalid.golden for that file (regenerate with -update). Wrong
// types are errors naming the key, never silent conversions (issue 8
// item 10).
func TestInvalidConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid-*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/invalid-*.yml: %v", err)
	}
	var got strings.Builder
	for _, f := range files {
		_, err := load(nil, f)
		if err == nil {
			t.Errorf("%s: loaded without an error", f)
			continue
		}
		fmt.Fprintf(&got, "%s: %s\n", filepath.Base(f), err)
	}
	golden := filepath.Join("testdata", "invalid.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Fatalf("errors differ from %s:\n got:\n%s\nwant:\n%s", golden, got.String(), want)
	}
}
