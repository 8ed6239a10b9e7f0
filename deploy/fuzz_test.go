package deploy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// FuzzParseState: any input either fails to parse or round-trips: what
// Marshal writes parses back to the same bytes.
func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"version":1,"edges":{}}`))
	f.Add([]byte(`{"version":1,"edges":{"e1":{"ipv4":"192.0.2.1","state":"draining","left_dns":"2026-12-01T06:00:00Z","ttl":60}}}`))
	f.Add([]byte(`{"version":1,"edges":{"e1":{"ipv6":"2001:db8::1","state":"failed","error":"tls: handshake timeout"}}}`))
	f.Add([]byte(`{"version":1,"edges":{"e1":null}}`))
	f.Add([]byte(`{"version":2,"edges":{},"withdrawn":{"e3":{"ipv4":"192.0.2.3","since":"2026-12-01T06:00:00Z","reason":"3 failed checks","left_dns":"2026-12-01T06:00:01Z","ttl":60,"firewalled_out":"2026-12-01T06:01:36Z","failed_rechecks":2,"next_check":"2026-12-01T06:03:36Z"}}}`))
	f.Add([]byte(`{"version":2,"edges":{},"withdrawn":{"e3":{"ipv4":"192.0.2.3","since":"2026-12-01T06:00:00Z","reason":"x","rechecking":true,"firewalled_out":"2026-12-01T06:01:36Z"}}}`))
	f.Add([]byte("{\"version\":1,\n\"edges\":{\"e1\":{\"state\":\"gone\"}}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseState(b)
		if err != nil {
			return
		}
		out := s.Marshal()
		s2, err := ParseState(out)
		if err != nil {
			t.Fatalf("Marshal wrote what ParseState refuses: %v\n%s", err, out)
		}
		if out2 := s2.Marshal(); !bytes.Equal(out, out2) {
			t.Fatalf("round trip differs:\n%s\n%s", out, out2)
		}
	})
}

// FuzzParseZone: any zone file either fails to parse or round-trips
// through Marshal.
func FuzzParseZone(f *testing.F) {
	z, _ := NewZone("example.test", "ns1.example.test", "127.0.0.1")
	f.Add(z.Marshal())
	f.Add([]byte("$ORIGIN example.test.\n@ 60 IN SOA ns1 hostmaster 1 3600 600 86400 60\nldap 60 IN A 192.0.2.1\nldap 60 IN AAAA 2001:db8::1\nother 300 IN TXT \"x y\"\n"))
	f.Add([]byte("$ORIGIN example.test.\n@ 60 IN SOA ns1 hostmaster 1 3600 600 86400 60\nldap 60 IN A 192.0.2.300\n"))
	f.Add([]byte("$ORIGIN example.test.\nldap.example.org. 60 IN A 192.0.2.1\n"))
	f.Add([]byte("$INCLUDE /etc/passwd\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		z, err := ParseZone(b, "example.test")
		if err != nil {
			return
		}
		out := z.Marshal()
		z2, err := ParseZone(out, "example.test")
		if err != nil {
			t.Fatalf("Marshal wrote what ParseZone refuses: %v\n%s", err, out)
		}
		if out2 := z2.Marshal(); !bytes.Equal(out, out2) {
			t.Fatalf("round trip differs:\n%s\n%s", out, out2)
		}
	})
}

// packetWriter is the dns.ResponseWriter of one UDP packet, for the fuzz
// target: it keeps what the server writes.
type packetWriter struct{ out []byte }

func (w *packetWriter) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
}
func (w *packetWriter) RemoteAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}
}
func (w *packetWriter) Write(b []byte) (int, error) { w.out = b; return len(b), nil }
func (w *packetWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	w.out = b
	return err
}
func (w *packetWriter) Close() error        { return nil }
func (w *packetWriter) TsigStatus() error   { return dns.ErrSig }
func (w *packetWriter) TsigTimersOnly(bool) {}
func (w *packetWriter) Hijack()             {}
func (w *packetWriter) Network() string     { return "udp" }

// FuzzServeDNS: whatever packet the server accepts over UDP, its answer
// packs, echoes the ID, and fits in one datagram: 512 bytes, or the
// query's EDNS size up to 1232 (a name of 60 edges answers ~1 KB); an
// unverified UPDATE changes nothing.
func FuzzServeDNS(f *testing.F) {
	var zone strings.Builder
	zone.WriteString("$ORIGIN example.test.\n@ 60 IN SOA ns1 hostmaster 1 3600 600 86400 60\n@ 60 IN NS ns1\n")
	for i := 1; i <= 60; i++ {
		fmt.Fprintf(&zone, "ldap 60 IN A 198.51.100.%d\n", i)
	}
	zone.WriteString("ldap 60 IN TXT \"not ours\"\n")
	file := filepath.Join(f.TempDir(), "fleet.zone")
	os.WriteFile(file, []byte(zone.String()), 0o644)
	srv, err := NewServer(serverConfig(file, nil))
	if err != nil {
		f.Fatal(err)
	}
	before := srv.zone.Marshal()
	seed := func(m *dns.Msg) {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(new(dns.Msg).SetQuestion("ldap.example.test.", dns.TypeA))
	seed(new(dns.Msg).SetQuestion("ldap.example.test.", dns.TypeA).SetEdns0(4096, false))
	seed(new(dns.Msg).SetQuestion("ldap.example.test.", dns.TypeA).SetEdns0(700, true))
	seed(new(dns.Msg).SetQuestion("ldap.example.test.", dns.TypeANY))
	seed(new(dns.Msg).SetQuestion("nowhere.example.test.", dns.TypeA))
	bad := new(dns.Msg).SetQuestion("ldap.example.test.", dns.TypeA).SetEdns0(1232, false)
	bad.IsEdns0().SetVersion(1)
	seed(bad)
	up := new(dns.Msg).SetUpdate("example.test.")
	up.Insert([]dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "ldap.example.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)}})
	seed(up)
	up.SetTsig("fleet-key.", dns.HmacSHA256, 300, 1764547200)
	seed(up)
	f.Fuzz(func(t *testing.T, b []byte) {
		r := new(dns.Msg)
		if len(b) < 12 || r.Unpack(b) != nil {
			return
		}
		var h dns.Header
		h.Id, h.Bits = binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:])
		h.Qdcount, h.Ancount = binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint16(b[6:])
		h.Nscount, h.Arcount = binary.BigEndian.Uint16(b[8:]), binary.BigEndian.Uint16(b[10:])
		if acceptMsg(h) != dns.MsgAccept {
			return
		}
		w := &packetWriter{}
		srv.ServeDNS(w, r)
		limit := dns.MinMsgSize
		if opt := r.IsEdns0(); opt != nil {
			limit = int(min(max(opt.UDPSize(), dns.MinMsgSize), maxUDPSize))
		}
		a := new(dns.Msg)
		if err := a.Unpack(w.out); err != nil || a.Id != r.Id || len(w.out) > limit {
			t.Fatalf("answer of %d bytes (limit %d), id %d for %d: %v\n%v", len(w.out), limit, a.Id, r.Id, err, a)
		}
		if !bytes.Equal(srv.zone.Marshal(), before) {
			t.Fatalf("an unverified message changed the zone:\n%v", r)
		}
	})
}

// FuzzParseRefused: any answer either fails to parse or gives counts
// that are finite, not negative, keyed by an unmapped address without a
// zone, and that parse back the same once written as an origin writes
// them.
func FuzzParseRefused(f *testing.F) {
	f.Add(refusedText(f, map[refusedKey]float64{
		{netip.MustParseAddr("192.0.2.11"), "rate"}:   40,
		{netip.MustParseAddr("192.0.2.11"), "conns"}:  2,
		{netip.MustParseAddr("2001:db8::11"), "rate"}: 1e9,
	}))
	f.Add([]byte("# TYPE edgefleet_origin_connections_active gauge\nedgefleet_origin_connections_active 3\n"))
	f.Add([]byte("edgefleet_origin_connections_active 0\n# TYPE edgefleet_front_edge_refused_total counter\n" +
		`edgefleet_front_edge_refused_total{edge="untrusted",reason="rate"} 7` + "\n" +
		`edgefleet_front_edge_refused_total{edge="::ffff:192.0.2.1",reason="conns"} 1.5e3 1733151600000` + "\n" +
		`edgefleet_front_edge_refused_total{edge="[fe80::1%eth0]:8636",reason="rate"} 2` + "\n"))
	f.Add([]byte("edgefleet_origin_connections_active 0\n# TYPE edgefleet_front_edge_refused_total gauge\nedgefleet_front_edge_refused_total{edge=\"192.0.2.1\"} 1\n"))
	f.Add([]byte("edgefleet_origin_connections_active 0\nedgefleet_front_edge_refused_total{edge=\"192.0.2.1\",reason=\"rate\"} NaN\n"))
	f.Add([]byte("edgefleet_origin_connections_active 0\n# TYPE edgefleet_front_edge_refused_total counter\n" +
		`edgefleet_front_edge_refused_total{edge="192.0.2.1",reason="a\"b\\c\nd"} 1` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		counts, err := parseRefused(bytes.NewReader(b))
		if err != nil {
			return
		}
		for k, v := range counts {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("%v: value %v", k, v)
			}
			if !k.edge.IsValid() || k.edge.Is4In6() || k.edge.Zone() != "" {
				t.Fatalf("key address %v", k.edge)
			}
		}
		back, err := parseRefused(bytes.NewReader(refusedText(t, counts)))
		if err != nil {
			t.Fatalf("parse of what an origin writes: %v", err)
		}
		if len(back) != len(counts) {
			t.Fatalf("round trip: %v, want %v", back, counts)
		}
		for k, v := range counts {
			if w, ok := back[k]; !ok || w != v {
				t.Fatalf("round trip of %v: %v, want %v", k, w, v)
			}
		}
	})
}
