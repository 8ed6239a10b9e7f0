package testbed_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestDocOriginPoolSlapd runs the slapd.conf of docs/origin-pool.md as
// written, its addresses, paths and nothing else replaced, on two slapds:
// the directory loaded into A only reaches B, a write on B reaches A and
// a write on A reaches B (multi-provider replication both ways).
func TestDocOriginPoolSlapd(t *testing.T) {
	testbed.Need(t, "slapd", "slapadd", "ldapsearch", "ldapadd")
	var conf string
	for _, b := range testbed.DocBlocks(t, "docs/origin-pool.md", "") {
		if strings.Contains(b, "serverID") {
			conf = b
		}
	}
	if conf == "" {
		t.Fatal("docs/origin-pool.md shows no slapd.conf")
	}
	var urls [2]string
	for i := range urls {
		port, err := testbed.LowPort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		urls[i] = fmt.Sprintf("ldap://127.0.0.1:%d/", port)
	}
	start := func(i int, ldif string) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "db"), 0o700); err != nil {
			t.Fatal(err)
		}
		c := strings.NewReplacer("ldap://10.0.0.2:389/", urls[0], "ldap://10.0.0.3:389/", urls[1],
			"/var/run/slapd", dir, "/var/lib/ldap", filepath.Join(dir, "db")).Replace(conf)
		path := testbed.WriteFile(t, dir, "slapd.conf", c)
		if ldif != "" {
			add := exec.Command(mustPath(t, "slapadd"), "-f", path, "-q")
			add.Stdin = strings.NewReader(ldif)
			if out, err := add.CombinedOutput(); err != nil {
				t.Fatalf("slapadd: %v\n%s", err, out)
			}
		}
		testbed.Start(t, mustPath(t, "slapd"), "-h", urls[i], "-f", path, "-d", "0")
		testbed.WaitTCP(t, strings.TrimSuffix(strings.TrimPrefix(urls[i], "ldap://"), "/"), 10*time.Second)
	}
	start(0, testbed.DirectoryLDIF(3))
	start(1, "")

	search := func(i int, filter string) string {
		out, _ := exec.Command("ldapsearch", "-x", "-H", urls[i], "-b", testbed.Suffix, "-LLL", filter, "dn").CombinedOutput()
		return string(out)
	}
	wait := func(i int, filter, want string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !strings.Contains(search(i, filter), want); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) { // a hang guard
				t.Fatalf("slapd %d never had %s:\n%s", i, want, search(i, filter))
			}
		}
	}
	wait(1, "(uid=carol)", "dn: "+testbed.User("carol"))
	add := func(i int, uid string) {
		t.Helper()
		ldif := fmt.Sprintf("dn: uid=%s,ou=people,%s\nobjectClass: inetOrgPerson\nuid: %s\ncn: %s\nsn: %s\n", uid, testbed.Suffix, uid, uid, uid)
		cmd := exec.Command("ldapadd", "-x", "-H", urls[i], "-D", testbed.RootDN, "-w", testbed.RootPW)
		cmd.Stdin = strings.NewReader(ldif)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("add %s on slapd %d: %v\n%s", uid, i, err, out)
		}
	}
	add(1, "written-on-b")
	wait(0, "(uid=written-on-b)", "dn: uid=written-on-b,")
	add(0, "written-on-a")
	wait(1, "(uid=written-on-a)", "dn: uid=written-on-a,")
}

func mustPath(t *testing.T, bin string) string {
	t.Helper()
	p, err := testbed.Path(bin)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
