package testbed_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// A syncprov provider and a consumer of it: the consumer's empty
// directory gets the provider's entries, with the entryUUIDs ReplicaLDIF
// gave them; a provider limit (size.pr) is in force.
func TestSlapdSyncrepl(t *testing.T) {
	testbed.Need(t, "ldapsearch")
	p := testbed.StartSlapds(t, 1, testbed.SlapdConfig{LDIF: testbed.ReplicaLDIF(testbed.DirectoryLDIF(5)), SyncProv: true,
		Limits: []string{"* size.pr=2"}})[0]
	c := testbed.StartSlapds(t, 1, testbed.SlapdConfig{Consumer: p.URL})[0]
	search := func(url string, args ...string) (string, error) {
		out, err := exec.Command("ldapsearch", append([]string{"-x", "-H", url, "-b", "ou=bulk," + testbed.Suffix, "-LLL"}, args...)...).CombinedOutput()
		return string(out), err
	}
	want, err := search(p.URL, "entryUUID")
	if err != nil || strings.Count(want, "entryUUID: ") != 6 {
		t.Fatalf("provider: %v\n%s", err, want)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) { // a hang guard
		if got, _ := search(c.URL, "entryUUID"); got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer never matched the provider:\n%s", want)
		}
	}
	if out, err := search(p.URL, "-E", "pr=3/noprompt", "1.1"); err == nil || !strings.Contains(out, "Administrative limit exceeded") {
		t.Errorf("a page of 3 with size.pr=2: %v\n%s", err, out)
	}
}
