package testbed_test

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestNamedUpdate: the named started here serves its zone and extra
// records, applies an update signed with its key (nsupdate -k) and refuses
// one signed with another secret.
func TestNamedUpdate(t *testing.T) {
	testbed.Need(t, "nsupdate", "dig")
	n := testbed.StartNamed(t, testbed.NamedConfig{Zone: "example.test", Records: []string{"other 300 IN A 192.0.2.9"}})
	if got := strings.TrimSpace(n.Dig(t, "+short", "other.example.test", "A")); got != "192.0.2.9" {
		t.Fatalf("dig other.example.test A = %q, want 192.0.2.9", got)
	}
	if n.KeyName != "fleet-key." || n.KeyAlgorithm != dns.HmacSHA256 || n.KeySecret == "" {
		t.Fatalf("key %q %q %q", n.KeyName, n.KeyAlgorithm, n.KeySecret)
	}
	host, port, _ := net.SplitHostPort(n.Addr)
	script := "server " + host + " " + port + "\nzone example.test\nupdate add ldap.example.test 60 A 192.0.2.1\nsend\n"
	cmd := exec.Command("nsupdate", "-k", n.KeyFile)
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nsupdate: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(n.Dig(t, "+short", "ldap.example.test", "A")); got != "192.0.2.1" {
		t.Fatalf("after update: dig ldap.example.test A = %q", got)
	}

	m := new(dns.Msg).SetUpdate(n.Zone)
	rr, _ := dns.NewRR("ldap.example.test. 60 IN A 192.0.2.2")
	m.Insert([]dns.RR{rr})
	m.SetTsig(n.KeyName, dns.HmacSHA256, 300, time.Now().Unix())
	c := &dns.Client{TsigSecret: map[string]string{n.KeyName: testbed.WrongKeySecret}, Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, n.Addr)
	if err == nil && r.Rcode == dns.RcodeSuccess {
		t.Fatal("update signed with a wrong secret accepted")
	}
	if got := strings.TrimSpace(n.Dig(t, "+short", "ldap.example.test", "A")); got != "192.0.2.1" {
		t.Fatalf("after refused update: dig ldap.example.test A = %q", got)
	}
}
