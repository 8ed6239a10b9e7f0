package dlp_test

import (
	"slices"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
)

// TestDocOriginPoolExample parses the DLP file of docs/origin-pool.md:
// both providers, slapd A first, as every host of the pool has it.
func TestDocOriginPoolExample(t *testing.T) {
	example := testbed.DocBlocks(t, "docs/origin-pool.md", "jsonc")[0]
	f, err := dlp.Parse("ldap_proxy.json", []byte(example))
	if err != nil {
		t.Fatalf("the documented example does not parse:\n%v", err)
	}
	if !slices.Equal(f.ServerOrder, []string{"SLAPD_A", "SLAPD_B"}) || len(f.Proxies) != 1 ||
		!slices.Equal(f.Proxies[0].Default, []string{"SLAPD_A", "SLAPD_B"}) {
		t.Fatalf("servers %v, proxies %+v", f.ServerOrder, f.Proxies)
	}
}
