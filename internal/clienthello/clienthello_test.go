package clienthello

import (
	"bytes"
	"errors"
	"testing"
)

const served = "ldap.example.test"

// TestRealClients: the hellos of Go crypto/tls and openssl s_client pass,
// with their SNI matched against the list (case folded), and are refused
// as wrong-sni for another list or without SNI.
func TestRealClients(t *testing.T) {
	names := []string{"other.example.test", "LDAP.Example.TEST"}
	for _, tc := range []struct {
		name   string
		hello  func(t *testing.T) []byte
		hasSNI bool
	}{
		{"go", func(t *testing.T) []byte { return goHello(t, served) }, true},
		{"go without SNI", func(t *testing.T) []byte { return goHello(t, "") }, false},
		{"openssl", func(t *testing.T) []byte { return opensslHello(t, "-servername", served) }, true},
		{"openssl tls1.2", func(t *testing.T) []byte { return opensslHello(t, "-servername", served, "-tls1_2") }, true},
		{"openssl without SNI", func(t *testing.T) []byte { return opensslHello(t, "-noservername") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.hello(t)
			if err := Check(b, nil); err != nil {
				t.Fatalf("without names: %v", err)
			}
			want := error(nil)
			if !tc.hasSNI {
				want = ErrWrongSNI
			}
			if err := Check(b, names); !errors.Is(err, want) || (want == nil) != (err == nil) {
				t.Fatalf("with names %v: %v, want %v", names, err, want)
			}
			if err := Check(b, []string{"ldap.example.test.evil"}); !errors.Is(err, ErrWrongSNI) {
				t.Fatalf("with another name: %v, want wrong-sni", err)
			}
			for i := range len(b) {
				if err := Check(b[:i], names); err != ErrMore {
					t.Fatalf("the first %d of %d bytes: %v, want ErrMore", i, len(b), err)
				}
			}
			if err := Check(append(b[:len(b):len(b)], 0x17, 0x03, 0x03, 0xff), nil); err != nil {
				t.Fatalf("with bytes after it: %v", err)
			}
			for _, size := range []int{1, 7, 100, 512} {
				r := refragment(t, b, size)
				err := Check(r, nil)
				if len(r) > MaxLen {
					if !errors.Is(err, errTooLarge) {
						t.Fatalf("in records of %d bytes, %d in all: %v, want too large", size, len(r), err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("in records of %d bytes: %v", size, err)
				}
			}
		})
	}
}

// TestSizeLimit: a hello of exactly MaxLen bytes passes, one byte more is
// refused at once, from its headers.
func TestSizeLimit(t *testing.T) {
	for _, size := range []int{4352, 8192, MaxLen, MaxLen + 1} {
		b := base().pad(size).bytes()
		if len(b) != size {
			t.Fatalf("padded to %d bytes, want %d", len(b), size)
		}
		err := Check(b, []string{served})
		if size <= MaxLen {
			if err != nil {
				t.Errorf("%d bytes: %v", size, err)
			}
			continue
		}
		// One record cannot hold more than MaxLen: past it the record
		// length itself is out of range.
		if !errors.Is(err, ErrNotTLS) || err.Error() != "not a TLS ClientHello: record length 16385 outside 1-16384" {
			t.Errorf("%d bytes: %v, want the record length out of range", size, err)
		}
		if err := Check(b[:recordHeader+handshakeHeader], nil); !errors.Is(err, ErrNotTLS) {
			t.Errorf("%d bytes, its headers alone: %v, want not-tls", size, err)
		}
	}
	if err := Check(refragment(t, base().pad(MaxLen-100).bytes(), 100), nil); !errors.Is(err, errTooLarge) {
		t.Errorf("fragmented past MaxLen by its record headers: %v", err)
	}
}

// TestMalformed: everything that is not a well-formed ClientHello, and
// prefixes that are decided early (a single wrong byte is enough).
func TestMalformed(t *testing.T) {
	good := base().bytes()
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrMore},
		{"one byte", []byte{0x16}, ErrMore},
		{"record header", good[:5], ErrMore},
		{"LDAP bind", []byte{0x30, 0x0c, 0x02, 0x01, 0x01, 0x60, 0x07, 0x02, 0x01, 0x03, 0x04, 0x00, 0x80, 0x00}, ErrNotTLS},
		{"LDAP first byte", []byte{0x30}, ErrNotTLS},
		{"SSLv2-style hello", []byte{0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10}, ErrNotTLS},
		{"PROXY v2", []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c"), ErrNotTLS},
		{"PROXY v1", []byte("PROXY TCP4 192.0.2.1 192.0.2.2 1 2\r\n"), ErrNotTLS},
		{"HTTP", []byte("GET / HTTP/1.1\r\n"), ErrNotTLS},
		{"alert record", set(good, 0, 21), ErrNotTLS},
		{"application data record", []byte{0x17, 0x03}, ErrNotTLS},
		{"record version 2.0", []byte{0x16, 0x02}, ErrNotTLS},
		{"record version 3.5", []byte{0x16, 0x03, 0x05}, ErrNotTLS},
		{"record length 0", []byte{0x16, 0x03, 0x01, 0x00, 0x00}, ErrNotTLS},
		{"record length 16385", []byte{0x16, 0x03, 0x01, 0x40, 0x01}, ErrNotTLS},
		{"server hello", set(good, 5, 2), ErrNotTLS},
		{"handshake length short", base().hsLen(-1).bytes(), ErrNotTLS},
		{"handshake length long", base().hsLen(+1).bytes(), ErrNotTLS}, // the extensions' length says it ends a byte earlier
		{"handshake length long, no extensions", base().with(func(h *hello) { h.exts, h.noExts = nil, true }).hsLen(+1).bytes(), ErrNotTLS},
		{"handshake length long, then garbage", append(base().hsLen(+1).bytes(), 0x30), ErrNotTLS},
		{"handshake length tiny", []byte{0x16, 0x03, 0x01, 0x00, 0x08, 0x01, 0x00, 0x00, 0x04}, ErrNotTLS},
		{"client version 2.0", set(good, 9, 2), ErrNotTLS},
		{"client version 3.5", set(good, 10, 5), ErrNotTLS},
		{"session id 33", base().with(func(h *hello) { h.sid = make([]byte, 33) }).bytes(), ErrNotTLS},
		{"odd cipher suites", base().with(func(h *hello) { h.suites = []byte{0x13, 0x01, 0x13} }).bytes(), ErrNotTLS},
		{"no cipher suite", base().with(func(h *hello) { h.suites = nil }).bytes(), ErrNotTLS},
		{"no compression method", base().with(func(h *hello) { h.comp = nil }).bytes(), ErrNotTLS},
		{"extensions length short", base().extLen(-1).bytes(), ErrNotTLS},
		{"extensions length long", base().extLen(+1).bytes(), ErrNotTLS},
		{"extension overruns", base().with(func(h *hello) { h.exts = append(h.exts, 0x00, 0x0a, 0x00, 0x09, 0x00) }).bytes(), ErrNotTLS},
		{"truncated extension", base().with(func(h *hello) { h.exts = append(h.exts, 0x00) }).bytes(), ErrNotTLS},
		{"two SNI extensions", base().with(func(h *hello) { h.exts = append(h.exts, sni(0, served)...) }).bytes(), ErrNotTLS},
		{"two host names", base().with(func(h *hello) { h.exts = sni(0, served, "a.example.test") }).bytes(), ErrNotTLS},
		{"SNI with a trailing dot", base().with(func(h *hello) { h.exts = sni(0, served+".") }).bytes(), ErrNotTLS},
		{"SNI with a NUL", base().with(func(h *hello) { h.exts = sni(0, served+"\x00.evil") }).bytes(), ErrNotTLS},
		{"empty SNI", base().with(func(h *hello) { h.exts = sni(0, "") }).bytes(), ErrNotTLS},
		{"empty server_name list", base().with(func(h *hello) { h.exts = ext(extServerName, []byte{0, 0}) }).bytes(), ErrNotTLS},
		{"record longer than the hello", base().recLen(+1).bytes(), ErrNotTLS}, // decided before the record is all there
		{"well-formed", good, nil},
		{"no extensions", base().with(func(h *hello) { h.exts, h.noExts = nil, true }).bytes(), ErrWrongSNI},
		{"another name type only", base().with(func(h *hello) { h.exts = sni(1, served) }).bytes(), ErrWrongSNI},
		{"SSL 3.0 record", set(good, 2, 0), nil},
		{"TLS 1.3 record version", set(good, 2, 4), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.b, []string{served})
			if tc.want == nil || tc.want == ErrMore {
				if err != tc.want {
					t.Fatalf("%v, want %v", err, tc.want)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
		})
	}
}

// TestEarlyRefusal: a ClientHello wrong in its first bytes is refused on
// what the edge's first read holds before it grows (4352 bytes), not
// after all the bytes its header declares: a fake header in front of
// filler, and each field up to the extensions' headers. Its prefixes
// before the wrong byte are ErrMore.
func TestEarlyRefusal(t *testing.T) {
	const small = 4096 + 256 // evloop's first read before it grows
	big := base().pad(8000)
	fake := append([]byte{0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0x3f, 0xfc}, make([]byte, small-9)...) // 16380 bytes declared
	for i := 9; i < len(fake); i++ {
		fake[i] = 'A'
	}
	zeros := append(big.bytes()[:11+32], make([]byte, small-11-32)...) // version and random, then zeros
	for _, tc := range []struct {
		name  string
		b     []byte
		wrong int // the offset of the first wrong byte
	}{
		{"fake header, filler", fake, 9},
		{"version and random, then zeros", zeros, 11 + 32 + 2}, // no cipher suite
		{"session id 33", big.with(func(h *hello) { h.sid = make([]byte, 33) }).bytes(), 11 + 32},
		{"session id past the hello", base().with(func(h *hello) { h.noExts = true; h.exts = nil }).recLen(-10).hsLen(-10).bytes(), 11 + 32},
		{"odd cipher suites", big.with(func(h *hello) { h.suites = []byte{0x13, 0x01, 0x13} }).bytes(), 11 + 32 + 1 + 32 + 1},
		{"no compression method", big.with(func(h *hello) { h.comp = nil }).bytes(), 11 + 32 + 1 + 32 + 2 + 4},
		{"extensions length long", big.extLen(+1).bytes(), 11 + 32 + 1 + 32 + 2 + 4 + 2 + 1},
		{"extensions length short", big.extLen(-1).bytes(), 11 + 32 + 1 + 32 + 2 + 4 + 2 + 1},
		{"extension overruns", base().with(func(h *hello) {
			h.exts = ext(21, make([]byte, 8000))
			h.exts[2] = 0xff // its length
		}).bytes(), 11 + 32 + 1 + 32 + 2 + 4 + 2 + 1 + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Check(tc.b[:min(len(tc.b), small)], nil); !errors.Is(err, ErrNotTLS) {
				t.Fatalf("%d bytes: %v, want not-tls", min(len(tc.b), small), err)
			}
			if err := Check(tc.b[:tc.wrong+1], nil); !errors.Is(err, ErrNotTLS) {
				t.Fatalf("up to the wrong byte: %v, want not-tls", err)
			}
			if err := Check(tc.b[:tc.wrong], nil); err != ErrMore {
				t.Fatalf("before the wrong byte: %v, want ErrMore", err)
			}
		})
	}
	for _, n := range []int{10, 50, 100, small, MaxLen - 1} { // a valid one is ErrMore all along
		if err := Check(base().pad(MaxLen).bytes()[:n], nil); err != ErrMore {
			t.Fatalf("a %d-byte prefix of a valid hello: %v", n, err)
		}
	}
}

// TestMixedNameTypes: an entry of another name type is skipped, the
// host_name after it is the one matched.
func TestMixedNameTypes(t *testing.T) {
	list := []byte{1, 0, 1, 'x', 0, 0, byte(len(served))}
	list = append(list, served...)
	data := append([]byte{0, byte(len(list))}, list...)
	b := base().with(func(h *hello) { h.exts = ext(extServerName, data) }).bytes()
	if err := Check(b, []string{served}); err != nil {
		t.Fatal(err)
	}
}

// TestErrorText: a refusal says why, with the sentinel's text first.
func TestErrorText(t *testing.T) {
	for _, tc := range []struct {
		b     []byte
		names []string
		want  string
	}{
		{[]byte{0x30}, nil, "not a TLS ClientHello: record type 48, not handshake (22)"},
		{[]byte{0x80, 0x2e, 0x01}, nil, "not a TLS ClientHello: an SSLv2-style record header (first byte 0x80)"},
		{base().bytes(), []string{"other.example.test"}, `server name not served: "ldap.example.test" is not among the server names`},
		{base().with(func(h *hello) { h.exts = nil }).bytes(), []string{served}, "server name not served: the ClientHello has no server name (SNI)"},
	} {
		if err := Check(tc.b, tc.names); err == nil || err.Error() != tc.want {
			t.Errorf("%x: %v, want %s", tc.b[:min(8, len(tc.b))], err, tc.want)
		}
	}
}

// TestNoAllocation: passing a ClientHello in one record allocates nothing.
func TestNoAllocation(t *testing.T) {
	b := base().bytes()
	names := []string{"a.example.test", served}
	if n := testing.AllocsPerRun(100, func() { Check(b, names) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// hello builds a synthetic ClientHello, one record, for the cases real
// clients never send.
type hello struct {
	sid, suites, comp, exts []byte
	noExts                  bool
	dRec, dHs, dExt         int // added to the record, handshake and extensions lengths
}

func base() hello {
	return hello{sid: make([]byte, 32), suites: []byte{0x13, 0x01, 0x13, 0x02}, comp: []byte{0}, exts: sni(0, served)}
}

func (h hello) with(f func(*hello)) hello { f(&h); return h }
func (h hello) recLen(d int) hello        { h.dRec = d; return h }
func (h hello) hsLen(d int) hello         { h.dHs = d; return h }
func (h hello) extLen(d int) hello        { h.dExt = d; return h }

// pad adds a padding extension (21) so that the record is size bytes.
func (h hello) pad(size int) hello {
	n := size - len(h.bytes()) - 4
	h.exts = append(h.exts[:len(h.exts):len(h.exts)], ext(21, make([]byte, n))...)
	return h
}

func (h hello) bytes() []byte {
	body := []byte{0x03, 0x03}
	body = append(body, make([]byte, 32)...)
	body = append(body, byte(len(h.sid)))
	body = append(body, h.sid...)
	body = append(body, byte(len(h.suites)>>8), byte(len(h.suites)))
	body = append(body, h.suites...)
	body = append(body, byte(len(h.comp)))
	body = append(body, h.comp...)
	if !h.noExts {
		n := len(h.exts) + h.dExt
		body = append(body, byte(n>>8), byte(n))
		body = append(body, h.exts...)
	}
	n := len(body) + h.dHs
	msg := append([]byte{typeClientHello, byte(n >> 16), byte(n >> 8), byte(n)}, body...)
	r := len(msg) + h.dRec
	return append([]byte{typeHandshake, 0x03, 0x01, byte(r >> 8), byte(r)}, msg...)
}

// ext is one extension.
func ext(typ int, data []byte) []byte {
	return append([]byte{byte(typ >> 8), byte(typ), byte(len(data) >> 8), byte(len(data))}, data...)
}

// sni is a server_name extension with the names, all of one name type.
func sni(typ byte, names ...string) []byte {
	var list []byte
	for _, n := range names {
		list = append(list, typ, byte(len(n)>>8), byte(len(n)))
		list = append(list, n...)
	}
	return ext(extServerName, append([]byte{byte(len(list) >> 8), byte(len(list))}, list...))
}

// set returns a copy of b with b[i] = v.
func set(b []byte, i int, v byte) []byte {
	c := bytes.Clone(b)
	c[i] = v
	return c
}

// refragment re-sends a one-record hello's handshake bytes in records
// of size bytes.
func refragment(t testing.TB, b []byte, size int) []byte {
	t.Helper()
	n := int(b[3])<<8 | int(b[4])
	if len(b) != recordHeader+n {
		t.Fatalf("not one whole record: %d bytes, record length %d", len(b), n)
	}
	var out []byte
	for p := b[recordHeader:]; len(p) > 0; {
		k := min(size, len(p))
		out = append(out, typeHandshake, b[1], b[2], byte(k>>8), byte(k))
		out = append(out, p[:k]...)
		p = p[k:]
	}
	return out
}

// TestNoRoomForTheNextRecord: records that end too near MaxLen for the
// next one's header and a byte are decided at once, not waited on.
func TestNoRoomForTheNextRecord(t *testing.T) {
	msg := base().pad(MaxLen).bytes()[recordHeader:] // 4347 handshake bytes
	first := msg[:MaxLen-recordHeader-2]             // a record ending 2 bytes before MaxLen
	b := append([]byte{typeHandshake, 3, 1, byte(len(first) >> 8), byte(len(first))}, first...)
	if err := Check(b, nil); !errors.Is(err, errTooLarge) {
		t.Fatalf("%d bytes, the hello unfinished: %v, want too large", len(b), err)
	}
}
