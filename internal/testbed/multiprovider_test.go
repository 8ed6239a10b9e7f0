package testbed_test

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestOriginPoolSlapdConfig runs the slapd configuration of
// docs/origin-pool.md as two providers replicating each other: ldap-b
// starts empty and gets the directory from ldap-a; a write on either is
// read on the other; ldap-a killed with SIGKILL misses a write made on
// ldap-b and has it, once, after it is started again.
func TestOriginPoolSlapdConfig(t *testing.T) {
	testbed.Need(t, "slapd", "slapadd", "ldapsearch", "ldapmodify")
	var addrs [2]string
	for i := range addrs {
		port, err := testbed.LowPort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	var sl [2]*testbed.Slapd
	for i := range sl {
		dir := t.TempDir()
		cfg := testbed.SlapdConfig{Addr: addrs[i], Conf: testbed.PoolSlapdConf(t, "../../docs/origin-pool.md", dir, i+1, "ldap://"+addrs[1-i])}
		if i == 0 {
			cfg.LDIF = testbed.DirectoryLDIF(3) + testbed.ReplicatorLDIF
		}
		sl[i] = testbed.StartSlapd(t, dir, cfg)
	}
	a, b := sl[0], sl[1]
	search := func(s *testbed.Slapd, base string, attrs ...string) string {
		out, _ := exec.Command("ldapsearch", append([]string{"-x", "-H", s.URL, "-D", testbed.RootDN, "-w", testbed.RootPW,
			"-b", base, "-LLL", "-o", "ldif-wrap=no"}, attrs...)...).CombinedOutput()
		return string(out)
	}
	modify := func(s *testbed.Slapd, ldif string) {
		t.Helper()
		cmd := exec.Command("ldapmodify", "-x", "-H", s.URL, "-D", testbed.RootDN, "-w", testbed.RootPW)
		cmd.Stdin = strings.NewReader(ldif)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ldapmodify on %s: %v\n%s", s.Addr, err, out)
		}
	}
	converge := func(what string, f func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !f(); time.Sleep(50 * time.Millisecond) { // a hang guard
			if time.Now().After(deadline) {
				t.Fatalf("never: %s", what)
			}
		}
	}

	want := search(a, testbed.Suffix, "entryUUID", "userPassword")
	if strings.Count(want, "dn: ") != 11 {
		t.Fatalf("ldap-a's directory:\n%s", want)
	}
	converge("ldap-b has ldap-a's directory, passwords included", func() bool { return search(b, testbed.Suffix, "entryUUID", "userPassword") == want })

	modify(a, "dn: uid=w1,ou=writes,dc=example,dc=com\nchangetype: add\nobjectClass: inetOrgPerson\nuid: w1\ncn: w1\nsn: from-a\n")
	converge("ldap-b has the add made on ldap-a", func() bool { return strings.Contains(search(b, "ou=writes,"+testbed.Suffix, "sn"), "sn: from-a") })
	modify(b, "dn: uid=w1,ou=writes,dc=example,dc=com\nchangetype: modify\nadd: description\ndescription: from-b\n")
	converge("ldap-a has the modify made on ldap-b", func() bool {
		return strings.Contains(search(a, "ou=writes,"+testbed.Suffix, "description"), "description: from-b")
	})

	a.Kill()
	modify(b, "dn: uid=w1,ou=writes,dc=example,dc=com\nchangetype: modify\nadd: description\ndescription: while-a-was-down\n")
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	entry := func(s *testbed.Slapd) string {
		return search(s, "uid=w1,ou=writes,"+testbed.Suffix, "description", "sn")
	}
	converge("ldap-a, started again, has the write it missed", func() bool { return strings.Contains(entry(a), "description: while-a-was-down") })
	converge("both providers hold the same entry", func() bool { return entry(a) == entry(b) })
	if got := entry(a); strings.Count(got, "description: ") != 2 || strings.Count(got, "sn: ") != 1 {
		t.Errorf("the entry after the catch-up, want each write once:\n%s", got)
	}
}
