package relay

import (
	"bytes"
	"errors"
	"testing"

	"github.com/edgefleet/edgefleet/internal/evloop"
)

// FuzzScreenProxy checks the edge's first-bytes check against its
// definition: a whole v1 or v2 signature refuses, a strict prefix of one
// waits for more, anything else passes; and the verdict on a stream is the
// same whether its bytes come at once or one read at a time (as the copy
// sees them).
func FuzzScreenProxy(f *testing.F) {
	for _, seed := range [][]byte{
		[]byte("PROXY TCP4 6.6.6.6 127.0.0.1 1 2\r\n"), sigV2, []byte("PROX"), []byte("\r\n\r\n\x00"),
		{0x16, 0x03, 0x01}, {0x30, 0x0c, 0x02, 0x01, 0x01}, []byte("PROXY"), []byte("PROXYZ"), {},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := error(nil)
		for _, sig := range [][]byte{sigV1, sigV2} {
			switch {
			case bytes.HasPrefix(b, sig):
				want = errClientProxy
			case len(b) < len(sig) && bytes.HasPrefix(sig, b):
				want = evloop.ErrMore
			}
		}
		if got := screenProxy(b); !errors.Is(got, want) {
			t.Fatalf("screenProxy(%q) = %v, want %v", b, got, want)
		}
		// One byte at a time: the first verdict other than ErrMore is final.
		var got error = evloop.ErrMore
		for i := 1; i <= len(b) && got == evloop.ErrMore; i++ {
			got = screenProxy(b[:i])
		}
		if !errors.Is(got, want) {
			t.Fatalf("byte by byte %q = %v, want %v", b, got, want)
		}
	})
}
