package deploy

import (
	"bytes"
	"testing"
)

// FuzzParseState: any input either fails to parse or round-trips: what
// Marshal writes parses back to the same bytes.
func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"version":1,"edges":{}}`))
	f.Add([]byte(`{"version":1,"edges":{"e1":{"ipv4":"192.0.2.1","state":"draining","left_dns":"2026-12-01T06:00:00Z","ttl":60}}}`))
	f.Add([]byte(`{"version":1,"edges":{"e1":{"ipv6":"2001:db8::1","state":"failed","error":"tls: handshake timeout"}}}`))
	f.Add([]byte(`{"version":1,"edges":{"e1":null}}`))
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
