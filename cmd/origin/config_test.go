package main

import (
	"flag"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

var update = flag.Bool("update", false, "rewrite testdata/invalid.golden")

// TestInvalidConfigs loads each testdata/invalid-*.yml: the error must be
// exactly the one in testdata/invalid.golden for that file (regenerate
// with -update). Wrong types are errors naming the key, never silent
// conversions.
func TestInvalidConfigs(t *testing.T) {
	testbed.InvalidConfigs(t, *update, func(path string) error { _, err := load(nil, path); return err })
}

// TestCoreTLSModeUnknown: a core.tls.mode that does not exist is named as
// such, not answered with the files tls would need.
func TestCoreTLSModeUnknown(t *testing.T) {
	c := defaultCore()
	c.TLS.Mode = "bogus"
	if _, err := c.coreConfig(); err == nil || err.Error() != `core.tls.mode: "bogus" is not off, tls or mtls` {
		t.Fatalf("error %v", err)
	}
}
