package probe

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNoOriginPackage: the agent's side (this package and the
// probe binary) builds without any of the origin's packages, nor the
// edge's, so that a change to the origin never changes what runs on the
// agents' hosts unseen. Tests may start an origin; only the build counts.
func TestImportsNoOriginPackage(t *testing.T) {
	const module = "github.com/edgefleet/edgefleet/"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".", "../cmd/probe").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(p, module)
		if !ok {
			continue
		}
		for _, side := range []string{"origin", "relay"} {
			if rel == side || strings.HasPrefix(rel, side+"/") {
				t.Errorf("probe depends on %s", p)
			}
		}
	}
}
