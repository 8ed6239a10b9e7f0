package proxyheader

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"edge-ams-1":    "edge-ams-1",
		"":              "",
		"a\nb":          "610a62",
		"\xff\x00":      "ff00",
		"zürich-edge":   "zürich-edge",
		"id\x1b[31mred": "69641b5b33316d726564",
	} {
		if got := printable([]byte(in)); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// edgeHeader is the v2 header an edge named edge writes for a connection
// from src to dst with the given id.
func edgeHeader(t testing.TB, src, dst, edge, id string) []byte {
	t.Helper()
	b, err := Append(nil, 2, netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst), id, edge)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// v2Body is a v2 header with a given command and family followed by
// body, for malformed cases.
func v2Body(cmd, fam byte, body ...byte) []byte {
	b := append([]byte{}, SigV2...)
	b = append(b, cmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	return append(b, body...)
}

// tlv is one TLV's bytes.
func tlv(typ byte, v string) []byte {
	return append([]byte{typ, byte(len(v) >> 8), byte(len(v))}, v...)
}

// FuzzParseV2 holds the allocation-free v2 parse to go-proxyproto's
// (Read, then interpret): on every whole v2 header both accept with the
// same Info, or both refuse with the same error. The seeds are the corpus
// in testdata (the v2 headers the front's sniff was fuzzed with), the
// edge's own headers and headers of every command and family; the
// fuzzer's bytes follow the signature.
func FuzzParseV2(f *testing.F) {
	v4 := []byte{192, 0, 2, 10, 198, 51, 100, 1, 0xc3, 0x50, 0x02, 0x7c}
	v6 := make([]byte, 36)
	copy(v6[10:], []byte{0xff, 0xff, 192, 0, 2, 10}) // IPv4-mapped source
	v6[32], v6[33] = 0x01, 0xbb
	unix := make([]byte, 216)
	copy(unix, "/run/edge.sock")
	tlvs := append(tlv(0x05, "id-1"), tlv(byte(TLVEdgeName), "edge-ams-1")...)
	for _, h := range [][]byte{
		edgeHeader(f, "192.0.2.10:50000", "198.51.100.1:636", "edge", "id"),
		edgeHeader(f, "[2001:db8::1]:50000", "[2001:db8::2]:636", "edge\n", "\xff"),
		v2Body(0x21, 0x11, append(v4, tlvs...)...),
		v2Body(0x21, 0x12, v4...),                  // UDP: no claimed address
		v2Body(0x21, 0x21, append(v6, tlvs...)...), // mapped: claimed as IPv4
		v2Body(0x21, 0x31, append(unix, tlvs...)...),
		v2Body(0x20, 0x00),                         // LOCAL, UNSPEC
		v2Body(0x20, 0x00, tlvs...),                // LOCAL with TLVs
		v2Body(0x20, 0x11, 1, 2, 3),                // LOCAL, block shorter than its family's
		v2Body(0x20, 0x11, append(v4, tlvs...)...), // LOCAL with an address
		v2Body(0x21, 0x00),                         // PROXY UNSPEC: refused
		v2Body(0x21, 0x11, 1, 2, 3),                // too short
		v2Body(0x22, 0x11, v4...),                  // bad command
		v2Body(0x11, 0x11, v4...),                  // bad version
		v2Body(0x21, 0x13, v4...),                  // bad transport
		v2Body(0x21, 0x11, append(v4, 0x05, 0)...), // truncated TLV
		v2Body(0x21, 0x11, append(v4, 0x05, 0, 9, 'x')...),
		v2Body(0x21, 0x11, append(append(v4, tlv(0x04, "pad")...), tlv(0x05, "a")...)...),
		v2Body(0x21, 0x11, append(append(v4, tlv(0x05, "a")...), tlv(0x05, "b")...)...), // last one wins
	} {
		f.Add(h[len(SigV2):])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b := append(append([]byte{}, SigV2...), data...)
		n, err := Len(b, V2)
		if err != nil || n == 0 {
			return // not a whole header within MaxV2Length: never parsed
		}
		b = b[:n]
		got, gerr := parseV2(b)
		var want Info
		h, werr := parseHeader(b)
		if werr == nil {
			want, werr = interpret(h)
		}
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("%x: error %v, go-proxyproto's %v", b, gerr, werr)
		}
		if gerr == nil && got != want {
			t.Fatalf("%x: %+v, go-proxyproto's %+v", b, got, want)
		}
	})
}
