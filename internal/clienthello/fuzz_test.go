package clienthello

import (
	"errors"
	"testing"
)

// FuzzCheck: no input panics; the verdict is one of the documented ones;
// it is final once decided (bytes appended after a nil, not-tls or
// wrong-sni verdict do not change it); a nil verdict's prefixes are
// ErrMore up to the end of the hello, nil after; MaxLen bytes are always
// enough to decide. The seed corpus in
// testdata/fuzz/FuzzCheck holds real hellos of Go crypto/tls and openssl
// s_client, and what the fuzzer found that reached new code.
func FuzzCheck(f *testing.F) {
	f.Add(base().bytes(), true)
	f.Add(refragment(f, base().bytes(), 16), false)
	f.Add(base().pad(MaxLen).bytes(), true)
	f.Add([]byte{0x80, 0x2e, 0x01, 0x03, 0x01}, false)
	f.Add([]byte("\r\n\r\n\x00\r\nQUIT\n"), false)
	f.Add([]byte{0x30, 0x0c, 0x02, 0x01, 0x01}, true)
	// prefixes refused early: a fake header in front of filler, and
	// wrong fields in a hello padded past evloop's small first read
	f.Add(append([]byte{0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0x3f, 0xfc}, make([]byte, 64)...), false)
	f.Add(base().pad(MaxLen).extLen(+1).bytes()[:4352], false)
	f.Add(base().pad(MaxLen).with(func(h *hello) { h.sid = make([]byte, 33) }).bytes()[:200], true)
	f.Add(base().pad(MaxLen).bytes()[:4352], true)
	f.Fuzz(func(t *testing.T, b []byte, withNames bool) {
		var names []string
		if withNames {
			names = []string{served, "Other.Example.Test"}
		}
		err := Check(b, names)
		if err != nil && err != ErrMore && !errors.Is(err, ErrNotTLS) && !errors.Is(err, ErrWrongSNI) {
			t.Fatalf("undocumented verdict %v", err)
		}
		if err == ErrMore {
			if len(b) >= MaxLen {
				t.Fatalf("ErrMore after %d bytes", len(b))
			}
			return
		}
		for _, tail := range [][]byte{{0x16}, b, make([]byte, MaxLen)} {
			if again := Check(append(b[:len(b):len(b)], tail...), names); !sameVerdict(err, again) {
				t.Fatalf("%v, then %v with %d more bytes", err, again, len(tail))
			}
		}
		if err != nil {
			return
		}
		passed := false // the prefixes say ErrMore up to the hello's end, nil from there
		for _, n := range []int{0, 1, 4, 5, 9, len(b) / 2, len(b) - 1} {
			p := Check(b[:n], names)
			if p != ErrMore && p != nil || passed && p != nil {
				t.Fatalf("passed at %d bytes, but its first %d say %v", len(b), n, p)
			}
			passed = p == nil
		}
	})
}

func sameVerdict(a, b error) bool {
	for _, s := range []error{ErrNotTLS, ErrWrongSNI} {
		if errors.Is(a, s) {
			return errors.Is(b, s)
		}
	}
	return a == b
}
