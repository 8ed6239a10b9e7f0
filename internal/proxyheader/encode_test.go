package proxyheader

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// TestAppend checks the hand-written v2 header byte for byte
// against go-proxyproto's, for IPv4, IPv6 and mixed families, and that
// v1 and off still come from go-proxyproto.
func TestAppend(t *testing.T) {
	ap := netip.MustParseAddrPort
	name := strings.Repeat("n", 255) // the longest name an edge accepts
	for _, tc := range []struct {
		version       int
		client, local netip.AddrPort
	}{
		{2, ap("192.0.2.7:40001"), ap("198.51.100.1:636")},
		{2, ap("[2001:db8::7]:40001"), ap("[2001:db8::1]:636")},
		{2, ap("192.0.2.7:40001"), ap("[2001:db8::1]:636")},
		{2, ap("[::ffff:192.0.2.7]:1"), ap("198.51.100.1:65535")},
		{1, ap("192.0.2.7:40001"), ap("198.51.100.1:636")},
		{0, ap("192.0.2.7:40001"), ap("198.51.100.1:636")},
	} {
		for _, n := range []string{"edge-1", name} {
			want, err := Format(tc.version, net.TCPAddrFromAddrPort(tc.client), net.TCPAddrFromAddrPort(tc.local), "IDIDIDIDIDIDIDIDIDIDIDIDID", n)
			if err != nil {
				t.Fatal(err)
			}
			prefix := []byte("kept")
			got, err := Append(prefix, tc.version, tc.client, tc.local, "IDIDIDIDIDIDIDIDIDIDIDIDID", n)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, append([]byte("kept"), want...)) {
				t.Errorf("v%d %v→%v name %d bytes:\n got %x\nwant kept+%x", tc.version, tc.client, tc.local, len(n), got, want)
			}
		}
	}
	client, local := ap("192.0.2.7:40001"), ap("198.51.100.1:636")
	var b [512]byte
	if n := testing.AllocsPerRun(100, func() {
		Append(b[:0], 2, client, local, "IDIDIDIDIDIDIDIDIDIDIDIDID", "edge-1")
	}); n != 0 {
		t.Errorf("v2 header: %v allocations, want 0", n)
	}
}
