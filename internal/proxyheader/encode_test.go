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

// FuzzAppendRead holds the two sides to each other and to go-proxyproto:
// every v2 header Append writes is one whole header to Len, and Read
// gives back the client's address, the id and the edge name as
// go-proxyproto reads them (printable, or hex when they are not).
func FuzzAppendRead(f *testing.F) {
	f.Add([]byte{192, 0, 2, 7}, uint16(40001), []byte{198, 51, 100, 1}, uint16(636), "IDIDIDIDIDIDIDIDIDIDIDIDID", "edge-1")
	f.Add(netip.MustParseAddr("2001:db8::7").AsSlice(), uint16(1), netip.MustParseAddr("2001:db8::1").AsSlice(), uint16(636), "", "")
	f.Add(netip.MustParseAddr("::ffff:192.0.2.7").AsSlice(), uint16(0), []byte{198, 51, 100, 1}, uint16(65535), "id", "edge\n")
	f.Add([]byte{10, 0, 0, 1}, uint16(2), netip.MustParseAddr("2001:db8::1").AsSlice(), uint16(3), "\xff", "zürich")
	f.Fuzz(func(t *testing.T, src []byte, sport uint16, dst []byte, dport uint16, id, name string) {
		sa, ok1 := netip.AddrFromSlice(src)
		da, ok2 := netip.AddrFromSlice(dst)
		if !ok1 || !ok2 || len(id) > 1000 || len(name) > 1000 {
			return
		}
		client, local := netip.AddrPortFrom(sa, sport), netip.AddrPortFrom(da, dport)
		b, err := Append(nil, 2, client, local, id, name)
		if err != nil {
			t.Fatal(err)
		}
		if k, decided := Sniff(b, false); k != V2 || !decided {
			t.Fatalf("Sniff = %v %v", k, decided)
		}
		n, err := Len(append(b, "rest"...), V2)
		if err != nil || n != len(b) {
			t.Fatalf("Len = %d, %v; want %d", n, err, len(b))
		}
		got, err := Read(b, V2)
		if err != nil {
			t.Fatal(err)
		}
		want := Info{Header: HeaderV2, Claimed: netip.AddrPortFrom(sa.Unmap(), sport).String(), Edge: printable([]byte(name)), ID: printable([]byte(id))}
		if got != want {
			t.Fatalf("Read = %+v, want %+v", got, want)
		}
		h, err := parseHeader(b)
		if err != nil {
			t.Fatalf("go-proxyproto: %v", err)
		}
		if ref, err := interpret(h); err != nil || ref != got {
			t.Fatalf("go-proxyproto reads %+v (%v), Read %+v", ref, err, got)
		}
	})
}

// TestAppendReadV1 reads back the v1 line Format writes, with go-proxyproto.
func TestAppendReadV1(t *testing.T) {
	client, local := netip.MustParseAddrPort("192.0.2.7:40001"), netip.MustParseAddrPort("[2001:db8::1]:636")
	for _, c := range []netip.AddrPort{client, netip.MustParseAddrPort("[2001:db8::7]:1")} {
		b, err := Append(nil, 1, c, local, "id", "edge")
		if err != nil {
			t.Fatal(err)
		}
		n, err := Len(b, V1)
		if k, _ := Sniff(b, false); k != V1 || err != nil || n != len(b) {
			t.Fatalf("%q: Sniff %v, Len %d %v", b, k, n, err)
		}
		got, err := Read(b, V1)
		if err != nil || got != (Info{Header: HeaderV1, Claimed: c.String()}) {
			t.Fatalf("%q: Read = %+v, %v", b, got, err)
		}
	}
}
