package wire

import (
	"errors"
	"fmt"
)

// The kinds of bad input, for errors.Is on a *ProtocolError.
var (
	ErrTooLarge   = errors.New("pdu too large")
	ErrIndefinite = errors.New("indefinite length")
	ErrMalformed  = errors.New("malformed pdu")
)

// ProtocolError is bad input from the peer: the connection cannot go on and
// the core answers with a Notice of Disconnection (protocolError).
type ProtocolError struct {
	Kind   error  // ErrTooLarge, ErrIndefinite or ErrMalformed
	Offset int    // byte offset in the PDU where the problem was found
	Detail string // what was wrong, lower case
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("ldap %v at byte %d: %s", e.Kind, e.Offset, e.Detail)
}

func (e *ProtocolError) Unwrap() error { return e.Kind }

func malformed(off int, format string, args ...any) *ProtocolError {
	return &ProtocolError{Kind: ErrMalformed, Offset: off, Detail: fmt.Sprintf(format, args...)}
}

// maxLengthBytes bounds the long-form length octets we accept. Non-minimal
// encodings (leading zero octets) are legal BER, so more than 4 octets are
// fine as long as the value fits; 0xff (127 octets) is reserved by X.690.
const maxLengthBytes = 126

// parseLength decodes the length octets starting at b[0] (the byte after
// the identifier). It returns the content length and the number of length
// octets. limit bounds the value; a larger one is ErrTooLarge. need > 0
// means b is too short and at least need length octets are required.
func parseLength(b []byte, off, limit int) (length, n, need int, err error) {
	if len(b) < 1 {
		return 0, 0, 1, nil
	}
	first := b[0]
	if first < 0x80 {
		return int(first), 1, 0, nil
	}
	if first == 0x80 {
		return 0, 0, 0, &ProtocolError{Kind: ErrIndefinite, Offset: off, Detail: "indefinite length is not allowed in LDAP"}
	}
	k := int(first & 0x7f)
	if k > maxLengthBytes {
		return 0, 0, 0, malformed(off, "reserved length octet 0x%02x", first)
	}
	if len(b) < 1+k {
		return 0, 0, 1 + k, nil
	}
	v := 0
	for _, c := range b[1 : 1+k] {
		v = v<<8 | int(c)
		if v > limit {
			return 0, 0, 0, &ProtocolError{Kind: ErrTooLarge, Offset: off, Detail: fmt.Sprintf("declared length exceeds %d bytes", limit)}
		}
	}
	return v, 1 + k, 0, nil
}

// tlv is one decoded element inside a PDU held in memory.
type tlv struct {
	tag   byte
	value []byte
	off   int // offset of the identifier in the PDU, for errors
	voff  int // offset of the first value octet in the PDU
}

// decoder walks the elements of a constructed value held in memory.
type decoder struct {
	b    []byte
	pos  int // index in b
	base int // offset of b[0] in the PDU
}

func (d *decoder) more() bool { return d.pos < len(d.b) }

// next reads one element. Multi-byte (high) tag numbers do not occur in
// LDAP's ASN.1 and are rejected.
func (d *decoder) next() (tlv, error) {
	start := d.pos
	off := d.base + start
	if start >= len(d.b) {
		return tlv{}, malformed(off, "missing element")
	}
	tag := d.b[start]
	if tag&0x1f == 0x1f {
		return tlv{}, malformed(off, "high tag number 0x%02x", tag)
	}
	remain := len(d.b) - start - 1
	length, n, need, err := parseLength(d.b[start+1:], off+1, remain)
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			// Inside a PDU a length beyond the enclosing value is a framing
			// error, not a size-cap breach.
			return tlv{}, malformed(off+1, "element length exceeds its container")
		}
		return tlv{}, err
	}
	if need > 0 {
		return tlv{}, malformed(off+1, "truncated length")
	}
	vstart := start + 1 + n
	if length > len(d.b)-vstart {
		return tlv{}, malformed(off+1, "element length exceeds its container")
	}
	d.pos = vstart + length
	return tlv{tag: tag, value: d.b[vstart:d.pos], off: off, voff: d.base + vstart}, nil
}

// expect reads one element that must carry tag.
func (d *decoder) expect(tag byte, what string) (tlv, error) {
	e, err := d.next()
	if err != nil {
		return e, err
	}
	if e.tag != tag {
		return e, malformed(e.off, "%s: tag 0x%02x, want 0x%02x", what, e.tag, tag)
	}
	return e, nil
}

// peekTag returns the next element's identifier, 0 at the end.
func (d *decoder) peekTag() byte {
	if d.pos >= len(d.b) {
		return 0
	}
	return d.b[d.pos]
}

// inner returns a decoder over a constructed element's contents.
func (e tlv) inner() *decoder { return &decoder{b: e.value, base: e.voff} }

// uint31 decodes a BER INTEGER content as a non-negative int of at most 31
// bits (a MessageID), accepting leading zero (non-minimal) octets.
func (e tlv) uint31(what string) (int32, error) {
	if len(e.value) == 0 {
		return 0, malformed(e.off, "%s: empty integer", what)
	}
	if e.value[0]&0x80 != 0 {
		return 0, malformed(e.off, "%s: negative integer", what)
	}
	var v int64
	for _, c := range e.value {
		v = v<<8 | int64(c)
		if v > 0x7fffffff {
			return 0, malformed(e.off, "%s: integer out of range", what)
		}
	}
	return int32(v), nil
}

// int decodes an ENUMERATED or INTEGER that may be negative (result codes
// are never negative in practice, but a peer's odd value must not panic).
func (e tlv) int(what string) (int, error) {
	if len(e.value) == 0 || len(e.value) > 8 {
		return 0, malformed(e.off, "%s: integer of %d octets", what, len(e.value))
	}
	v := int64(int8(e.value[0]))
	for _, c := range e.value[1:] {
		v = v<<8 | int64(c)
	}
	return int(v), nil
}

// bytes is the whole element (identifier, length and value) in pdu, the
// PDU its decoder's offsets count from.
func (e tlv) bytes(pdu []byte) []byte { return pdu[e.off : e.voff+len(e.value)] }
