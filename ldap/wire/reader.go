package wire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// DefaultMax is the size cap of a Reader until SetMax is called: the
// core's cap after a successful bind.
const DefaultMax = 4 << 20

// bufSize is the read buffer of a Reader. PDUs that fit are returned as a
// slice of it without copying; larger ones are read into their own buffer.
// Kept small because every client and backend connection has one.
const bufSize = 8 << 10

// keepMax bounds the large-PDU buffer a Reader keeps between calls, so one
// big search entry does not pin megabytes to an idle connection.
const keepMax = 64 << 10

// Reader frames whole LDAPMessages from a stream without decoding them.
type Reader struct {
	br  *bufio.Reader
	max int
	buf []byte
}

// NewReader returns a Reader over r with the DefaultMax cap.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: newBuf(r), max: DefaultMax}
}

func newBuf(r io.Reader) *bufio.Reader {
	// A caller's own bufio.Reader is reused when it can hold any header
	// (identifier + up to 127 length octets).
	if br, ok := r.(*bufio.Reader); ok && br.Size() >= 256 {
		return br
	}
	return bufio.NewReaderSize(r, bufSize)
}

// SetMax sets the largest PDU accepted, header included, in bytes. The core
// uses 256 KiB before a successful bind and 4 MiB after.
func (r *Reader) SetMax(n int) { r.max = n }

// Buffered is the number of bytes already read from the stream but not yet
// returned by Next. Before a StartTLS upgrade it must be 0: a client that
// sent more after the StartTLS request broke the protocol.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// Reset makes the Reader read from another stream (the TLS connection after
// StartTLS), dropping any buffered bytes; the cap is kept.
func (r *Reader) Reset(src io.Reader) { r.br.Reset(src) }

// Await waits until the next PDU has started (a byte of it has arrived),
// consuming nothing, so that the caller can bound the rest with a
// deadline while leaving an idle stream unbounded. Errors are Next's.
func (r *Reader) Await() error {
	_, err := r.br.Peek(1)
	return err
}

// Next returns the raw bytes of the next LDAPMessage: tag 0x30 and a
// definite length, long-form and non-minimal lengths accepted. The slice is
// valid until the next call unless copied.
//
// Errors: io.EOF at a clean PDU boundary; io.ErrUnexpectedEOF when the
// stream ends inside a PDU; *ProtocolError (ErrTooLarge, ErrIndefinite,
// ErrMalformed) for bad input; the stream's own errors unchanged. The
// declared length is checked against the cap before anything is allocated.
func (r *Reader) Next() ([]byte, error) {
	hdr, err := r.br.Peek(2)
	if err != nil {
		return nil, eofError(err, len(hdr))
	}
	if hdr[0] != 0x30 {
		return nil, malformed(0, "LDAPMessage must start with 0x30, got 0x%02x", hdr[0])
	}
	length, n, need, err := parseLength(hdr[1:], 1, r.max)
	if need > 0 {
		hdr, err = r.br.Peek(1 + need)
		if err != nil {
			return nil, eofError(err, 1)
		}
		length, n, _, err = parseLength(hdr[1:], 1, r.max)
	}
	if err != nil {
		return nil, err
	}
	total := 1 + n + length
	if total > r.max {
		return nil, &ProtocolError{Kind: ErrTooLarge, Offset: 1, Detail: fmt.Sprintf("pdu of %d bytes exceeds %d", total, r.max)}
	}
	if total <= r.br.Size() {
		b, err := r.br.Peek(total)
		if err != nil {
			return nil, eofError(err, 1)
		}
		_, _ = r.br.Discard(total) // cannot fail: the bytes are buffered
		return b, nil
	}
	var b []byte
	if total <= cap(r.buf) {
		b = r.buf[:total]
	} else {
		b = make([]byte, total)
		if total <= keepMax {
			r.buf = b
		}
	}
	if _, err := io.ReadFull(r.br, b); err != nil {
		return nil, eofError(err, 1)
	}
	return b, nil
}

// eofError turns an EOF after some bytes of a PDU into ErrUnexpectedEOF.
func eofError(err error, got int) error {
	if errors.Is(err, io.EOF) && got > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}
