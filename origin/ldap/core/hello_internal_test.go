package core

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
)

// clientHello is the first record a Go client sends with cs in its cache
// (nil: none).
func clientHello(t *testing.T, cache tls.ClientSessionCache, maxVersion uint16) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		tls.Client(c, &tls.Config{ServerName: "core.test", InsecureSkipVerify: true, ClientSessionCache: cache,
			MaxVersion: maxVersion}).Handshake()
		c.Close()
	}()
	var first [1]byte
	if _, err := s.Read(first[:]); err != nil {
		t.Fatal(err)
	}
	raw, _, err := readHello(s, first[0])
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestHelloTickets: a hello without a cached session offers no ticket; a
// cut-off or corrupted one offers nothing and never panics.
func TestHelloTickets(t *testing.T) {
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		raw := clientHello(t, nil, v)
		if got := helloTickets(raw[5:]); len(got) != 0 {
			t.Errorf("version %x: a hello without a session offers %d tickets", v, len(got))
		}
		for n := range len(raw) - 5 {
			helloTickets(raw[5 : 5+n])
			b := bytes.Clone(raw[5:])
			b[n] ^= 0xff
			helloTickets(b)
		}
	}
}
