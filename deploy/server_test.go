package deploy

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

const testSecret = "c2VjcmV0LW9mLXRoZS1lbWJlZGRlZC1zZXJ2ZXI="

// embedded serves example.test on loopback (UDP and TCP) from a zone file
// holding zone ("" for a new zone); the key fleet-key may update
// ldap.example.test. It returns the server and its zone file.
func embedded(t *testing.T, zone string, log *slog.Logger) (*Server, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "fleet.zone")
	if zone != "" {
		if err := os.WriteFile(file, []byte(zone), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := NewServer(serverConfig(file, log))
	if err != nil {
		t.Fatal(err)
	}
	pc, ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve(pc, ln)
	t.Cleanup(func() { srv.Close() })
	return srv, file
}

func serverConfig(file string, log *slog.Logger) ServerConfig {
	return ServerConfig{Zone: "example.test", ZoneFile: file, KeyName: "fleet-key", Algorithm: "hmac-sha256",
		Secret: testSecret, Names: []string{"ldap.example.test"}, Log: log}
}

// newUpdate is an UPDATE of example.test. adding the records of add (zone
// file lines) and deleting those of del (nsupdate's "update delete" forms:
// a bare name deletes every RRset, a name and a type one RRset).
func newUpdate(t *testing.T, add []string, del []string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg).SetUpdate("example.test.")
	for _, s := range add {
		rr, err := dns.NewRR("$ORIGIN example.test.\n" + s)
		if err != nil {
			t.Fatal(err)
		}
		m.Insert([]dns.RR{rr})
	}
	for _, s := range del {
		f := strings.Fields(s)
		hdr := dns.RR_Header{Name: dns.Fqdn(f[0] + ".example.test"), Rrtype: dns.TypeANY}
		if len(f) > 1 {
			hdr.Rrtype = dns.StringToType[f[1]]
		}
		m.RemoveRRset([]dns.RR{&dns.ANY{Hdr: hdr}})
	}
	return m
}

// exchange signs m with the key (now) and sends it over network.
func exchange(t *testing.T, addr, network string, m *dns.Msg) *dns.Msg {
	t.Helper()
	m.SetTsig("fleet-key.", dns.HmacSHA256, 300, time.Now().Unix())
	c := &dns.Client{Net: network, TsigSecret: map[string]string{"fleet-key.": testSecret}, Timeout: 10 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("update over %s: %v", network, err)
	}
	return r
}

// TestServerRefusesWhatItCannotReload: over UDP and TCP, an update of
// anything but the A/AAAA RRsets of name is REFUSED (a CNAME beside the A
// records, a TXT, a CAA whose tag has a space — which the zone parser
// refuses at the next start — a delete of every RRset), and so is one that
// would take the zone past 2000 records; refused updates leave the zone
// file as it was, and the server starts again from the file it wrote.
func TestServerRefusesWhatItCannotReload(t *testing.T) {
	var zone strings.Builder
	zone.WriteString("$ORIGIN example.test.\n@ 60 IN SOA ns1 hostmaster 1 3600 600 86400 60\n@ 60 IN NS ns1\nldap 300 IN TXT \"not ours\"\n")
	for i := 1; i <= maxZoneRecords-5; i++ { // with SOA, NS, TXT: 1998 records
		fmt.Fprintf(&zone, "r%d 60 IN A 192.0.2.%d\n", i, i%250+1)
	}
	srv, file := embedded(t, zone.String(), nil)
	for _, network := range []string{"udp", "tcp"} {
		for _, tc := range []struct {
			name     string
			add, del []string
		}{
			{"cname beside the A records", []string{"ldap 60 IN CNAME elsewhere.example.net."}, nil},
			{"txt", []string{`ldap 60 IN TXT "ours now"`}, nil},
			{"caa with a space in the tag", []string{`ldap 60 IN CAA 0 issue "ca.example.net"`}, nil},
			{"delete every rrset", nil, []string{"ldap"}},
			{"delete the txt", nil, []string{"ldap TXT"}},
		} {
			m := newUpdate(t, tc.add, tc.del)
			if caa, ok := m.Ns[0].(*dns.CAA); ok {
				caa.Tag = "is sue"
			}
			before, _ := os.ReadFile(file)
			if r := exchange(t, srv.Addr, network, m); r.Rcode != dns.RcodeRefused {
				t.Errorf("%s over %s: %s, want REFUSED", tc.name, network, dns.RcodeToString[r.Rcode])
			}
			if after, _ := os.ReadFile(file); string(after) != string(before) {
				t.Errorf("%s over %s: the zone file changed", tc.name, network)
			}
		}
	}
	// 1998 + 2 = 2000 records: accepted; one more is not.
	if r := exchange(t, srv.Addr, "tcp", newUpdate(t, []string{"ldap 60 IN A 198.51.100.1", "ldap 60 IN AAAA 2001:db8::1"}, nil)); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("the 2000th record: %s", dns.RcodeToString[r.Rcode])
	}
	if r := exchange(t, srv.Addr, "udp", newUpdate(t, []string{"ldap 60 IN A 198.51.100.2"}, nil)); r.Rcode != dns.RcodeRefused {
		t.Fatalf("the 2001st record: %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	srv.Close()
	again, err := NewServer(serverConfig(file, nil))
	if err != nil {
		t.Fatalf("the server does not start from the file it wrote: %v", err)
	}
	if got := again.zone.get("ldap.example.test.", dns.TypeA); len(got) != 1 {
		t.Fatalf("after the restart ldap has %v", got)
	}
	if got := again.zone.get("ldap.example.test.", dns.TypeTXT); len(got) != 1 {
		t.Fatalf("after the restart the operator's TXT is %v", got)
	}
}
