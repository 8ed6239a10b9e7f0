package wire

// Reading a PDU's head and its paged-results control, for the core: with
// the decoder and limits Parse uses, never a second BER reader.

// OIDPagedResults is the Simple Paged Results control (RFC 2696).
const OIDPagedResults = "1.2.840.113556.1.4.319"

// Peek returns the message id and protocolOp tag of one PDU without the
// rest of the parse: the hot path, every search entry a server returns.
// It checks what it reads as Parse does (the LDAPMessage frame, the id, an
// application-class tag); ok is false where Parse fails on those.
func Peek(raw []byte) (id int32, op byte, ok bool) {
	top := &decoder{b: raw}
	outer, err := top.expect(0x30, "LDAPMessage")
	if err != nil || top.more() {
		return 0, 0, false
	}
	d := outer.inner()
	idEl, err := d.expect(0x02, "messageID")
	if err != nil {
		return 0, 0, false
	}
	if id, err = idEl.uint31("messageID"); err != nil {
		return 0, 0, false
	}
	op = d.peekTag()
	if op&0xc0 != 0x40 {
		return 0, 0, false
	}
	return id, op, true
}

// AfterID returns what follows the message id in an LDAPMessage (its
// protocolOp and controls), without copying: two requests that differ only
// by their ids have the same. ok is false where Parse fails on the frame or
// the id.
func AfterID(raw []byte) ([]byte, bool) {
	top := &decoder{b: raw}
	outer, err := top.expect(0x30, "LDAPMessage")
	if err != nil || top.more() {
		return nil, false
	}
	d := outer.inner()
	if _, err := d.expect(0x02, "messageID"); err != nil {
		return nil, false
	}
	return d.b[d.pos:], true
}

// Paged is the value of a paged-results control: the page size asked for
// (or, in a response, the server's estimate) and the cookie, empty on the
// first page and after the last.
type Paged struct {
	Size   int
	Cookie string
}

// parts splits an LDAPMessage into its id, protocolOp and controls
// (ok false when it has none).
func parts(raw []byte) (id, op, controls tlv, ok bool, err error) {
	top := &decoder{b: raw}
	outer, err := top.expect(0x30, "LDAPMessage")
	if err != nil {
		return id, op, controls, false, err
	}
	d := outer.inner()
	if id, err = d.expect(0x02, "messageID"); err != nil {
		return id, op, controls, false, err
	}
	if op, err = d.next(); err != nil {
		return id, op, controls, false, err
	}
	if d.peekTag() != 0xa0 {
		return id, op, controls, false, nil
	}
	controls, err = d.next()
	return id, op, controls, err == nil, err
}

// pagedControl reports whether the Control c is the paged-results one and
// returns its controlType and, when present, its criticality.
func pagedControl(c tlv) (typ, crit tlv, hasCrit, ok bool) {
	d := c.inner()
	typ, err := d.expect(0x04, "controlType")
	if err != nil || string(typ.value) != OIDPagedResults {
		return typ, crit, false, false
	}
	if d.peekTag() == 0x01 {
		if crit, err = d.next(); err != nil {
			return typ, crit, false, false
		}
		hasCrit = true
	}
	return typ, crit, hasCrit, true
}

// FindPaged returns the paged-results control of a message (a paged
// search request or its SearchResultDone). found is false when there is
// none or it cannot be read.
func FindPaged(raw []byte) (p Paged, found bool) {
	_, _, controls, ok, err := parts(raw)
	if err != nil || !ok {
		return p, false
	}
	for d := controls.inner(); d.more(); {
		c, err := d.next()
		if err != nil {
			return p, false
		}
		if _, _, _, ok := pagedControl(c); !ok {
			continue
		}
		fields := c.inner()
		var last tlv
		for fields.more() {
			if last, err = fields.next(); err != nil {
				return p, false
			}
		}
		if last.tag != 0x04 { // controlValue
			return p, false
		}
		vd := last.inner()
		seq, err := vd.expect(0x30, "paged results value")
		if err != nil || vd.more() {
			return p, false
		}
		v := seq.inner()
		size, err := v.expect(0x02, "size")
		if err != nil {
			return p, false
		}
		n, err := size.uint31("size")
		if err != nil {
			return p, false
		}
		cookie, err := v.expect(0x04, "cookie")
		if err != nil || v.more() {
			return p, false
		}
		return Paged{Size: int(n), Cookie: string(cookie.value)}, true
	}
	return p, false
}

// RestartPaged returns raw with its paged-results control asking for size
// entries from the start (an empty cookie), its criticality kept; the id,
// the operation and the other controls are the same bytes.
func RestartPaged(raw []byte, size int) ([]byte, error) { return WithPaged(raw, Paged{Size: size}) }

// WithPaged returns raw with its paged-results control asking for p (a
// page of p.Size entries after p.Cookie), its criticality kept; the id,
// the operation and the other controls are the same bytes.
func WithPaged(raw []byte, p Paged) ([]byte, error) {
	id, op, controls, ok, err := parts(raw)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, malformed(0, "no controls")
	}
	var ctls [][]byte
	for d := controls.inner(); d.more(); {
		c, err := d.next()
		if err != nil {
			return nil, err
		}
		typ, crit, hasCrit, paged := pagedControl(c)
		if !paged {
			ctls = append(ctls, c.bytes(raw))
			continue
		}
		fields := [][]byte{typ.bytes(raw)}
		if hasCrit {
			fields = append(fields, crit.bytes(raw))
		}
		value := tlvBytes(0x04, tlvBytes(0x30, integer(0x02, int64(p.Size)), str(0x04, p.Cookie)))
		ctls = append(ctls, tlvBytes(0x30, append(fields, value)...))
	}
	return tlvBytes(0x30, id.bytes(raw), op.bytes(raw), tlvBytes(0xa0, ctls...)), nil
}
