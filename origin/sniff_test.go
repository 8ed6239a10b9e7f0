package origin

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"testing/iotest"

	"github.com/edgefleet/edgefleet/internal/proxyheader"
	proxyproto "github.com/pires/go-proxyproto"
)

// v2Header builds a PROXY v2 header from src to dst with the edge name and
// unique id TLVs our edge sends (empty values are left out).
func v2Header(t testing.TB, src, dst, edge, id string) []byte {
	t.Helper()
	h := proxyproto.HeaderProxyFromAddrs(2, tcpAddr(t, src), tcpAddr(t, dst))
	var tlvs []proxyproto.TLV
	if id != "" {
		tlvs = append(tlvs, proxyproto.TLV{Type: proxyproto.PP2_TYPE_UNIQUE_ID, Value: []byte(id)})
	}
	if edge != "" {
		tlvs = append(tlvs, proxyproto.TLV{Type: proxyheader.TLVEdgeName, Value: []byte(edge)})
	}
	if err := h.SetTLVs(tlvs); err != nil {
		t.Fatal(err)
	}
	b, err := h.Format()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tcpAddr(t testing.TB, s string) *net.TCPAddr {
	t.Helper()
	a, err := net.ResolveTCPAddr("tcp", s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// v2Raw is a v2 header with a given command, family and length field
// followed by body, for malformed cases.
func v2Raw(cmd, fam byte, length uint16, body []byte) []byte {
	b := append([]byte{}, proxyheader.SigV2...)
	b = append(b, cmd, fam)
	b = binary.BigEndian.AppendUint16(b, length)
	return append(b, body...)
}

var (
	clientHello = []byte{0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03}
	ldapBind    = []byte{0x30, 0x0c, 0x02, 0x01, 0x01, 0x60, 0x07, 0x02, 0x01, 0x03, 0x04, 0x00, 0x80, 0x00}
)

func TestSniffAndReadHeader(t *testing.T) {
	v2 := v2Header(t, "192.0.2.10:50000", "198.51.100.1:636", "edge-ams-1", "c0ffee01")
	v2v6 := v2Header(t, "[2001:db8::7]:443", "[2001:db8::1]:636", "", "")
	local := v2Raw(0x20, 0x00, 0, nil)
	// A bad TLV: type 0xE0 claims 200 bytes, 3 follow.
	badTLV := v2Raw(0x21, 0x11, 12+6, append(make([]byte, 12), 0xE0, 0x00, 0xC8, 'a', 'b', 'c'))
	tests := []struct {
		name    string
		in      []byte
		kind    proxyheader.Kind
		empty   bool // refused as empty (nothing came)
		wantErr bool // readHeader or interpret fails
		info    proxyheader.Info
		rest    []byte // bytes left for the inner service
	}{
		{name: "tls client hello", in: clientHello, kind: proxyheader.None, rest: clientHello},
		{name: "ldap bind", in: ldapBind, kind: proxyheader.None, rest: ldapBind},
		{name: "starts like v1 then differs", in: []byte("PROXIMITY"), kind: proxyheader.None, rest: []byte("PROXIMITY")},
		{name: "starts like v2 then differs", in: []byte("\r\n\r\nhello"), kind: proxyheader.None, rest: []byte("\r\n\r\nhello")},
		{name: "signature prefix then eof", in: []byte("PROX"), kind: proxyheader.None, rest: []byte("PROX")},
		{name: "empty", in: nil, kind: proxyheader.None, empty: true},
		{
			name: "v2 with tlvs", in: append(append([]byte{}, v2...), clientHello...), kind: proxyheader.V2,
			info: proxyheader.Info{Header: HeaderV2, Claimed: "192.0.2.10:50000", Edge: "edge-ams-1", ID: "c0ffee01"},
			rest: clientHello,
		},
		{name: "v2 ipv6", in: v2v6, kind: proxyheader.V2, info: proxyheader.Info{Header: HeaderV2, Claimed: "[2001:db8::7]:443"}},
		{name: "v2 local", in: append(local, ldapBind...), kind: proxyheader.V2, info: proxyheader.Info{Header: HeaderLocal}, rest: ldapBind},
		{
			name: "v1 tcp4", in: []byte("PROXY TCP4 192.0.2.10 198.51.100.1 50000 636\r\n\x30\x0c"), kind: proxyheader.V1,
			info: proxyheader.Info{Header: HeaderV1, Claimed: "192.0.2.10:50000"}, rest: []byte{0x30, 0x0c},
		},
		{name: "v1 tcp6", in: []byte("PROXY TCP6 2001:db8::7 2001:db8::1 443 636\r\n"), kind: proxyheader.V1, info: proxyheader.Info{Header: HeaderV1, Claimed: "[2001:db8::7]:443"}},
		// nginx on a dual-stack listener (ipv6only=off) with an IPv4 client.
		{name: "v1 tcp6 mapped", in: []byte("PROXY TCP6 ::ffff:127.0.0.9 ::ffff:127.0.0.1 53633 38211\r\nx"), kind: proxyheader.V1, info: proxyheader.Info{Header: HeaderV1, Claimed: "127.0.0.9:53633"}, rest: []byte("x")},
		{name: "v1 unknown", in: []byte("PROXY UNKNOWN\r\n"), kind: proxyheader.V1, info: proxyheader.Info{Header: HeaderLocal}},
		{name: "v1 garbage", in: []byte("PROXY garbage\r\n"), kind: proxyheader.V1, wantErr: true},
		{name: "v1 missing ports", in: []byte("PROXY TCP4 192.0.2.10 198.51.100.1\r\n"), kind: proxyheader.V1, wantErr: true},
		{name: "v1 no crlf", in: []byte("PROXY TCP4 192.0.2.10 198.51.100.1 1 2\n"), kind: proxyheader.V1, wantErr: true},
		{name: "v1 too long", in: append([]byte("PROXY "), bytes.Repeat([]byte("x"), 200)...), kind: proxyheader.V1, wantErr: true},
		{name: "v1 truncated", in: []byte("PROXY TCP4 192.0.2.10"), kind: proxyheader.V1, wantErr: true},
		{name: "v2 truncated prefix", in: append(append([]byte{}, proxyheader.SigV2...), 0x21), kind: proxyheader.V2, wantErr: true},
		{name: "v2 truncated address", in: v2Raw(0x21, 0x11, 12, []byte{192, 0, 2}), kind: proxyheader.V2, wantErr: true},
		{name: "v2 oversized", in: v2Raw(0x21, 0x11, proxyheader.MaxV2Length+1, nil), kind: proxyheader.V2, wantErr: true},
		{name: "v2 max length ok", in: v2Raw(0x21, 0x11, proxyheader.MaxV2Length, append(make([]byte, 12), append([]byte{0xEE, 0x0F, 0xF1}, make([]byte, proxyheader.MaxV2Length-15)...)...)), kind: proxyheader.V2, info: proxyheader.Info{Header: HeaderV2, Claimed: "0.0.0.0:0"}},
		{name: "v2 bad tlv", in: badTLV, kind: proxyheader.V2, wantErr: true},
		{name: "v2 bad command", in: v2Raw(0x2F, 0x11, 12, make([]byte, 12)), kind: proxyheader.V2, wantErr: true},
		{name: "v2 bad version", in: v2Raw(0x31, 0x11, 12, make([]byte, 12)), kind: proxyheader.V2, wantErr: true},
		{name: "v2 proxy unspec", in: v2Raw(0x21, 0x00, 0, nil), kind: proxyheader.V2, wantErr: true},
		{name: "v2 length too short for family", in: v2Raw(0x21, 0x11, 4, make([]byte, 4)), kind: proxyheader.V2, wantErr: true},
		{name: "v2 tlv header cut short", in: v2Raw(0x21, 0x11, 14, append(make([]byte, 12), 0xE0, 0x00)), kind: proxyheader.V2, wantErr: true},
		{name: "v2 length counts bytes that never come", in: v2Raw(0x21, 0x11, 40, make([]byte, 20)), kind: proxyheader.V2, wantErr: true},
		{
			name: "v2 empty and noop tlvs", kind: proxyheader.V2, in: append(v2Raw(0x21, 0x11, 12+3+4, append(append(make([]byte, 12), 0xE0, 0x00, 0x00), 0x04, 0x00, 0x01, 0xFF)), 'x'),
			info: proxyheader.Info{Header: HeaderV2, Claimed: "0.0.0.0:0"}, rest: []byte("x"),
		},
		{
			name: "v2 tlv with control characters is logged as hex", kind: proxyheader.V2,
			in:   v2Raw(0x21, 0x11, 12+3+3, append(make([]byte, 12), 0xE0, 0x00, 0x03, 'a', '\n', 'b')),
			info: proxyheader.Info{Header: HeaderV2, Claimed: "0.0.0.0:0", Edge: "610a62"},
		},
		// v2 IPv6 family carrying an IPv4-mapped source: the IPv4 form.
		{name: "v2 ipv6 mapped source", in: v2Header(t, "[::ffff:192.0.2.7]:9", "[::ffff:198.51.100.1]:636", "", ""), kind: proxyheader.V2, info: proxyheader.Info{Header: HeaderV2, Claimed: "192.0.2.7:9"}},
		// LOCAL keeps claimed empty even when it carries addresses.
		{name: "v2 local with addresses", in: v2Raw(0x20, 0x11, 12, []byte{192, 0, 2, 1, 198, 51, 100, 1, 0, 1, 0, 2}), kind: proxyheader.V2, info: proxyheader.Info{Header: HeaderLocal}},
		// LOCAL whose length does not fit its family: the block is skipped.
		{name: "v2 local short block", in: append(v2Raw(0x20, 0x11, 2, []byte{0, 0}), 'y'), kind: proxyheader.V2, info: proxyheader.Info{Header: HeaderLocal}, rest: []byte("y")},
		// Unix-socket and UDP sources are no client address: claimed stays empty.
		{name: "v2 unix stream", in: v2Raw(0x21, 0x31, 216, make([]byte, 216)), kind: proxyheader.V2, info: proxyheader.Info{Header: HeaderV2}},
		{name: "v2 udp over ipv4", in: v2Raw(0x21, 0x12, 12, []byte{192, 0, 2, 1, 198, 51, 100, 1, 0, 1, 0, 2}), kind: proxyheader.V2, info: proxyheader.Info{Header: HeaderV2}},
		{name: "v2 undefined family byte", in: v2Raw(0x21, 0x13, 12, make([]byte, 12)), kind: proxyheader.V2, wantErr: true},
		{name: "v1 tcp4 with ipv6 address", in: []byte("PROXY TCP4 2001:db8::1 198.51.100.1 1 2\r\n"), kind: proxyheader.V1, wantErr: true},
		{name: "v1 extra token", in: []byte("PROXY TCP4 192.0.2.1 198.51.100.1 1 2 3\r\n"), kind: proxyheader.V1, wantErr: true},
		{name: "v1 unknown with addresses", in: []byte("PROXY UNKNOWN ffff:f::1 ffff:f::2 65535 65535\r\nz"), kind: proxyheader.V1, info: proxyheader.Info{Header: HeaderLocal}, rest: []byte("z")},
		{name: "v1 exactly 107 bytes", in: append(append([]byte("PROXY UNKNOWN "), bytes.Repeat([]byte("f"), 91)...), '\r', '\n'), kind: proxyheader.V1, info: proxyheader.Info{Header: HeaderLocal}},
		{name: "v1 108 bytes", in: append(append([]byte("PROXY UNKNOWN "), bytes.Repeat([]byte("f"), 92)...), '\r', '\n'), kind: proxyheader.V1, wantErr: true},
	}
	for _, tt := range tests {
		for _, trickle := range []bool{false, true} {
			name := tt.name
			if trickle {
				name += "/one byte at a time"
			}
			t.Run(name, func(t *testing.T) {
				var src io.Reader = bytes.NewReader(tt.in)
				if trickle {
					src = iotest.OneByteReader(src)
				}
				d, rest := scan(src)
				if d.k != tt.kind || tt.empty != (d.result == ResultEmpty) {
					t.Fatalf("scan = %+v; want kind %v, empty %v", d, tt.kind, tt.empty)
				}
				if tt.empty {
					return
				}
				if (d.step == stepRefuse) != tt.wantErr {
					t.Fatalf("decision %+v, want error %v", d, tt.wantErr)
				}
				if d.step == stepRefuse {
					if d.result != ResultBadHeader {
						t.Fatalf("refused as %s, want %s", d.result, ResultBadHeader)
					}
					return
				}
				info := d.info
				if d.k == proxyheader.None {
					info = proxyheader.Info{}
				}
				if info != tt.info {
					t.Errorf("info = %+v, want %+v", info, tt.info)
				}
				if !bytes.Equal(rest, tt.rest) {
					t.Errorf("rest = %q, want %q", rest, tt.rest)
				}
			})
		}
	}
}

// scan feeds src to examine as the front does, one read at a time (a
// trusted source, no require_header), and returns the decision and, when
// forwarded, the bytes left for the inner service.
func scan(src io.Reader) (decision, []byte) {
	buf := make([]byte, 0, proxyheader.BufSize)
	var rerr error
	for {
		d := examine(buf, rerr, true, false)
		switch d.step {
		case stepRefuse:
			return d, nil
		case stepForward:
			rest, _ := io.ReadAll(src)
			return d, append(append([]byte{}, buf[d.n:]...), rest...)
		}
		if len(buf) == cap(buf) {
			panic("examine undecided on a full buffer")
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			rerr = err
		}
	}
}

// FuzzSniff feeds arbitrary first bytes through the sniff and header path,
// whole and one byte at a time. It must never panic, never consume bytes it
// does not recognise as a header, and decide the same way however the
// bytes arrive.
func FuzzSniff(f *testing.F) {
	f.Add(clientHello)
	f.Add(ldapBind)
	f.Add([]byte("PROXY TCP4 192.0.2.10 198.51.100.1 50000 636\r\nrest"))
	f.Add(v2Header(f, "192.0.2.10:50000", "198.51.100.1:636", "edge", "id"))
	f.Fuzz(func(t *testing.T, data []byte) {
		type outcome struct {
			k    proxyheader.Kind
			err  bool
			info proxyheader.Info
			rest []byte
		}
		run := func(src io.Reader) outcome {
			d, rest := scan(src)
			if d.step == stepRefuse {
				if d.result == ResultEmpty && len(data) != 0 {
					t.Fatalf("refused as empty on %d bytes", len(data))
				}
				return outcome{k: d.k, err: true}
			}
			o := outcome{k: d.k, info: d.info, rest: rest}
			if d.k == proxyheader.None && !bytes.Equal(o.rest, data) {
				t.Fatalf("bytes of a non-header connection changed: %q → %q", data, o.rest)
			}
			if consumed := len(data) - len(o.rest); consumed > proxyheader.PrefixLenV2+proxyheader.MaxV2Length {
				t.Fatalf("consumed %d bytes of header", consumed)
			}
			return o
		}
		whole := run(bytes.NewReader(data))
		trickled := run(iotest.OneByteReader(bytes.NewReader(data)))
		if whole.k != trickled.k || whole.err != trickled.err || whole.info != trickled.info || !bytes.Equal(whole.rest, trickled.rest) {
			t.Fatalf("whole %+v != one byte at a time %+v", whole, trickled)
		}
	})
}
