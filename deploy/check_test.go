package deploy

import (
	"bytes"
	"context"
	"net"
	"net/netip"
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
			srv, _ := embedded(t, "", nil)
			return server{srv.Addr, testSecret, func() uint32 { return soa(srv.Addr) }}
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

// recorder keeps what a connection writes.
type recorder struct {
	net.Conn
	b *bytes.Buffer
}

func (r recorder) Write(p []byte) (int, error) {
	r.b.Write(p)
	return r.Conn.Write(p)
}

// TestPublisherUpdateNotReplayable: an add fleet sent, captured on the
// wire and sent again after the remove, is refused by BIND 9 (NXRRSET: its
// prerequisite is the SOA the add was made against) and by the embedded
// server (REFUSED by its replay cache; after a restart, which empties the
// cache, NXRRSET like BIND); the address stays unpublished.
func TestPublisherUpdateNotReplayable(t *testing.T) {
	type server struct {
		addr, key string
		restart   func() string // nil: not tested
	}
	for _, tc := range []struct {
		name   string
		replay int // the rcode of the replay
		start  func(t *testing.T) server
	}{
		{"bind", dns.RcodeNXRrset, func(t *testing.T) server {
			n := testbed.StartNamed(t, testbed.NamedConfig{Zone: "example.test", Names: []string{"ldap.example.test"}})
			return server{addr: n.Addr, key: n.KeySecret}
		}},
		{"embedded", dns.RcodeRefused, func(t *testing.T) server {
			srv, file := embedded(t, "", nil)
			return server{addr: srv.Addr, key: testSecret, restart: func() string {
				srv.Close()
				return serve(t, serverConfig(file, nil)).Addr
			}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t)
			var sent []*bytes.Buffer
			pub := &Publisher{Server: s.addr, Zone: "example.test.", Name: "ldap.example.test.", KeyName: "fleet-key.", Algorithm: dns.HmacSHA256, Secret: s.key,
				Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					if err != nil || network != "tcp" {
						return c, err
					}
					b := new(bytes.Buffer)
					sent = append(sent, b)
					return recorder{c, b}, nil
				}}
			ctx := context.Background()
			for _, a := range []string{"198.51.100.1", "198.51.100.2"} {
				if err := pub.Apply(ctx, Change{Op: OpAdd, Addr: netip.MustParseAddr(a), TTL: 60}); err != nil {
					t.Fatal(err)
				}
			}
			add := sent[len(sent)-1].Bytes()[2:] // the add of .2, without the TCP length
			if err := pub.Apply(ctx, Change{Op: OpRemove, Addr: netip.MustParseAddr("198.51.100.2")}); err != nil {
				t.Fatal(err)
			}
			check := func(addr string, want int) {
				t.Helper()
				if r := raw(t, addr, "tcp", add); r.Rcode != want {
					t.Fatalf("the replayed add: %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[want])
				}
				pub.Server = addr
				if got, err := pub.Read(ctx); err != nil || len(got.A) != 1 {
					t.Fatalf("after the replay the server answers %v (%v)", got.A, err)
				}
			}
			check(s.addr, tc.replay)
			if s.restart != nil {
				check(s.restart(), dns.RcodeNXRrset)
			}
		})
	}
}

// TestPublisherRetriesMovedZone: another writer changing the zone between
// fleet's read of the SOA and its UPDATE (NXRRSET) makes fleet read the
// SOA again and resend; both changes are there.
func TestPublisherRetriesMovedZone(t *testing.T) {
	srv, _ := embedded(t, "", nil)
	raced := false
	pub := &Publisher{Server: srv.Addr, Zone: "example.test.", Name: "ldap.example.test.", KeyName: "fleet-key.", Algorithm: dns.HmacSHA256, Secret: testSecret,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if network == "tcp" && !raced {
				raced = true
				if r := exchange(t, addr, "tcp", newUpdate(t, []string{"ldap 60 IN A 198.51.100.99"}, nil)); r.Rcode != dns.RcodeSuccess {
					t.Errorf("the other writer: %s", dns.RcodeToString[r.Rcode])
				}
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
	if err := pub.Apply(context.Background(), Change{Op: OpAdd, Addr: netip.MustParseAddr("198.51.100.1"), TTL: 60}); err != nil {
		t.Fatal(err)
	}
	if got := answers(t, srv.Addr); len(got) != 2 {
		t.Fatalf("the server answers %v, want both writers' addresses", got)
	}
	if n := value(srv.results[UpdateRefused]); n != 1 {
		t.Fatalf("%v refused updates, want the first try only", n)
	}
}
