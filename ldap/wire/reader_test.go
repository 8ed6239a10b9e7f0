package wire_test

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/edgefleet/edgefleet/ldap/wire"
)

// unbind with id 1 in several length encodings.
var (
	unbindShort      = []byte{0x30, 0x05, 0x02, 0x01, 0x01, 0x42, 0x00}
	unbindLong       = []byte{0x30, 0x81, 0x05, 0x02, 0x01, 0x01, 0x42, 0x00}
	unbindNonMinimal = []byte{0x30, 0x84, 0x00, 0x00, 0x00, 0x05, 0x02, 0x01, 0x01, 0x42, 0x00}
	unbindTenOctets  = append([]byte{0x30, 0x8a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x05}, 0x02, 0x01, 0x01, 0x42, 0x00)
)

func TestReaderFraming(t *testing.T) {
	big := wire.Result(7, wire.TagSearchResultDone, 0, "", strings.Repeat("x", 100<<10))
	tests := []struct {
		name    string
		stream  []byte
		max     int
		want    [][]byte
		wantErr error // after the PDUs in want
	}{
		{"short", unbindShort, 0, [][]byte{unbindShort}, io.EOF},
		{"long form", unbindLong, 0, [][]byte{unbindLong}, io.EOF},
		{"non-minimal 4 octets", unbindNonMinimal, 0, [][]byte{unbindNonMinimal}, io.EOF},
		{"non-minimal 10 octets", unbindTenOctets, 0, [][]byte{unbindTenOctets}, io.EOF},
		{"three in a row", bytes.Join([][]byte{unbindShort, unbindNonMinimal, unbindLong}, nil), 0,
			[][]byte{unbindShort, unbindNonMinimal, unbindLong}, io.EOF},
		{"larger than the buffer", append(slicesClone(big), unbindShort...), 0, [][]byte{big, unbindShort}, io.EOF},
		{"empty stream", nil, 0, nil, io.EOF},
		{"cut in the header", unbindNonMinimal[:4], 0, nil, io.ErrUnexpectedEOF},
		{"cut after the tag", unbindShort[:1], 0, nil, io.ErrUnexpectedEOF},
		{"cut in the body", unbindShort[:5], 0, nil, io.ErrUnexpectedEOF},
		{"cut in a large body", big[:20000], 0, nil, io.ErrUnexpectedEOF},
		{"not a sequence", []byte("GET / HTTP/1.1\r\n\r\n"), 0, nil, wire.ErrMalformed},
		{"tls client hello", []byte{0x16, 0x03, 0x01, 0x00, 0xa5}, 0, nil, wire.ErrMalformed},
		{"indefinite", []byte{0x30, 0x80, 0x02, 0x01, 0x01, 0x42, 0x00, 0x00, 0x00}, 0, nil, wire.ErrIndefinite},
		{"reserved length octet", []byte{0x30, 0xff, 0x01}, 0, nil, wire.ErrMalformed},
		{"at the cap", unbindShort, len(unbindShort), [][]byte{unbindShort}, io.EOF},
		{"one over the cap", unbindShort, len(unbindShort) - 1, nil, wire.ErrTooLarge},
		{"huge declared length, no body", []byte{0x30, 0x84, 0x7f, 0xff, 0xff, 0xff}, 0, nil, wire.ErrTooLarge},
		{"2^64 declared", []byte{0x30, 0x88, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0, nil, wire.ErrTooLarge},
		{"good then garbage", append(slicesClone(unbindShort), 0x04, 0x00), 0, [][]byte{unbindShort}, wire.ErrMalformed},
	}
	for _, tc := range tests {
		for _, mode := range []string{"whole", "one byte at a time"} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				var src io.Reader = bytes.NewReader(tc.stream)
				if mode != "whole" {
					src = iotest.OneByteReader(src)
				}
				r := wire.NewReader(src)
				if tc.max > 0 {
					r.SetMax(tc.max)
				}
				for i, w := range tc.want {
					got, err := r.Next()
					if err != nil {
						t.Fatalf("pdu %d: %v", i, err)
					}
					if !bytes.Equal(got, w) {
						t.Fatalf("pdu %d = % x, want % x", i, head(got), head(w))
					}
				}
				_, err := r.Next()
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				var pe *wire.ProtocolError
				if isProto := errors.As(err, &pe); isProto != (tc.wantErr != io.EOF && tc.wantErr != io.ErrUnexpectedEOF) {
					t.Fatalf("err %T %v: ProtocolError=%v", err, err, isProto)
				}
			})
		}
	}
}

// TestReaderCapBeforeAllocation: a declared length above the cap is refused
// before any body byte is read, so a peer cannot make us allocate it.
func TestReaderCapBeforeAllocation(t *testing.T) {
	hdr := []byte{0x30, 0x84, 0x00, 0x40, 0x00, 0x01} // 4 MiB + 1 declared
	r := wire.NewReader(io.MultiReader(bytes.NewReader(hdr), failReader{}))
	// Bytes, not a count of allocations: the race detector adds a few of
	// its own, while the declared 4 MiB would dwarf anything else.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := r.Next(); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("err = %v", err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("%d bytes allocated for a refused PDU", n)
	}
	// Under the cap but the peer goes away: the error says so.
	r = wire.NewReader(bytes.NewReader([]byte{0x30, 0x83, 0x10, 0x00, 0x00, 0x02}))
	if _, err := r.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v", err)
	}
}

// failReader fails the test if anything past the header is read.
type failReader struct{}

func (failReader) Read([]byte) (int, error) { return 0, errors.New("body must not be read") }

// TestReaderSliceReuse documents that a returned slice is only valid until
// the next call: callers that keep a PDU copy it.
func TestReaderSliceReuse(t *testing.T) {
	s := append(wire.BindRequest(1, "cn=a", []byte("x")), wire.UnbindRequest(2)...)
	r := wire.NewReader(bytes.NewReader(s))
	a, _ := r.Next()
	keep := bytes.Clone(a)
	b, _ := r.Next()
	if m, err := wire.Parse(keep); err != nil || m.BindName != "cn=a" {
		t.Fatalf("kept copy: %v %v", m, err)
	}
	if m, err := wire.Parse(b); err != nil || m.Op != wire.TagUnbindRequest {
		t.Fatalf("second: %v %v", m, err)
	}
}

func TestReaderResetAfterStartTLS(t *testing.T) {
	r := wire.NewReader(bytes.NewReader(unbindShort))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if r.Buffered() != 0 {
		t.Fatalf("buffered %d", r.Buffered())
	}
	r.SetMax(64)
	r.Reset(bytes.NewReader(unbindLong))
	got, err := r.Next()
	if err != nil || !bytes.Equal(got, unbindLong) {
		t.Fatalf("after reset: % x %v", got, err)
	}
}

func head(b []byte) []byte {
	if len(b) > 16 {
		return b[:16]
	}
	return b
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

// Await returns once a PDU has started, consuming nothing; at the end of
// the stream it returns io.EOF like Next.
func TestAwait(t *testing.T) {
	pr, pw := io.Pipe()
	r := wire.NewReader(pr)
	started := make(chan error, 1)
	go func() { started <- r.Await() }()
	pw.Write(unbindShort[:1])
	if err := <-started; err != nil {
		t.Fatalf("Await after one byte: %v", err)
	}
	go func() { pw.Write(unbindShort[1:]); pw.Close() }()
	raw, err := r.Next()
	if err != nil || !bytes.Equal(raw, unbindShort) {
		t.Fatalf("Next after Await: %x %v", raw, err)
	}
	if err := r.Await(); err != io.EOF {
		t.Fatalf("Await at the end: %v, want io.EOF", err)
	}
}
