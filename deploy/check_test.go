package deploy

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestPublisherCheck: the key check is accepted and changes nothing (the
// SOA serial stays) for the allowed name, and fails with the same lines as
// an update for a wrong key or another name — against BIND 9 and against
// the embedded server.
func TestPublisherCheck(t *testing.T) {
	type server struct {
		addr, key string
		serial    func() uint32
	}
	soa := func(addr string) uint32 {
		r, err := dns.Exchange(new(dns.Msg).SetQuestion("example.test.", dns.TypeSOA), addr)
		if err != nil || len(r.Answer) != 1 {
			t.Fatalf("SOA from %s: %v %v", addr, r, err)
		}
		return r.Answer[0].(*dns.SOA).Serial
	}
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) server
	}{
		{"bind", func(t *testing.T) server {
			n := testbed.StartNamed(t, testbed.NamedConfig{Zone: "example.test", Names: []string{"ldap.example.test"}})
			return server{n.Addr, n.KeySecret, func() uint32 { return soa(n.Addr) }}
		}},
		{"embedded", func(t *testing.T) server {
			srv, err := NewServer(ServerConfig{Zone: "example.test", ZoneFile: filepath.Join(t.TempDir(), "fleet.zone"),
				KeyName: "fleet-key", Algorithm: "hmac-sha256", Secret: "c2VjcmV0LW9mLXRoZS1lbWJlZGRlZC1zZXJ2ZXI=", Names: []string{"ldap.example.test"}})
			if err != nil {
				t.Fatal(err)
			}
			pc, ln, err := Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv.Serve(pc, ln)
			t.Cleanup(func() { srv.Close() })
			return server{srv.Addr, "c2VjcmV0LW9mLXRoZS1lbWJlZGRlZC1zZXJ2ZXI=", func() uint32 { return soa(srv.Addr) }}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t)
			pub := func(name, secret string) *Publisher {
				return &Publisher{Server: s.addr, Zone: "example.test.", Name: name, KeyName: "fleet-key.", Algorithm: dns.HmacSHA256, Secret: secret}
			}
			before := s.serial()
			if err := pub("ldap.example.test.", s.key).Check(context.Background()); err != nil {
				t.Fatalf("check with the right key: %v", err)
			}
			if after := s.serial(); after != before {
				t.Fatalf("the check changed the zone: serial %d -> %d", before, after)
			}
			err := pub("ldap.example.test.", testbed.WrongKeySecret).Check(context.Background())
			if err == nil || !strings.Contains(err.Error(), "rejected TSIG key fleet-key.") {
				t.Fatalf("wrong key: %v", err)
			}
			err = pub("other.example.test.", s.key).Check(context.Background())
			if err == nil || !strings.Contains(err.Error(), "REFUSED") {
				t.Fatalf("other name: %v", err)
			}
		})
	}
}
