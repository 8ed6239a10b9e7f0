package core

import (
	"errors"
	"slices"
)

// Paged searches (RFC 2696) across failover. A paging cookie belongs to
// the server (and connection) that issued it. When the next page of a
// paged search must go to another server, the core restarts the search
// there from the beginning, asking for the entries the client already has
// plus one page, drops those it already has, and forwards the rest with
// the new server's cookie: the client goes on paging without noticing.

// oidPaged is the Simple Paged Results control.
const oidPaged = "1.2.840.113556.1.4.319"

// pagedRequest is the paging control of a search request.
type pagedRequest struct {
	size   int
	cookie string
}

// pagedChain is where a cookie handed to the client stands: entries the
// client received in the whole paged search so far, and the backend
// connection that issued the cookie.
type pagedChain struct {
	n  int
	be *backend
}

// maxChains bounds the cookies a session remembers.
const maxChains = 32

var errBER = errors.New("malformed BER")

// tlv is one BER element inside a buffer.
type berTLV struct {
	tag        byte
	start, end int // the whole element
	vstart     int // its value
}

func readTLV(b []byte, off int) (berTLV, error) {
	if off+2 > len(b) {
		return berTLV{}, errBER
	}
	t := berTLV{tag: b[off], start: off}
	l := int(b[off+1])
	p := off + 2
	if l&0x80 != 0 {
		n := l & 0x7f
		if n == 0 || n > 4 || p+n > len(b) {
			return berTLV{}, errBER
		}
		l = 0
		for _, c := range b[p : p+n] {
			l = l<<8 | int(c)
		}
		p += n
	}
	if l < 0 || p+l > len(b) {
		return berTLV{}, errBER
	}
	t.vstart, t.end = p, p+l
	return t, nil
}

// children lists the elements inside a constructed element's value.
func children(b []byte, t berTLV) ([]berTLV, error) {
	var out []berTLV
	for off := t.vstart; off < t.end; {
		c, err := readTLV(b[:t.end], off)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
		off = c.end
	}
	return out, nil
}

// messageParts splits an LDAPMessage into its id, protocolOp and controls
// (zero berTLV when absent).
func messageParts(raw []byte) (id, op, controls berTLV, err error) {
	outer, err := readTLV(raw, 0)
	if err != nil || outer.tag != 0x30 {
		return id, op, controls, errBER
	}
	parts, err := children(raw, outer)
	if err != nil || len(parts) < 2 {
		return id, op, controls, errBER
	}
	id, op = parts[0], parts[1]
	if len(parts) > 2 && parts[2].tag == 0xa0 {
		controls = parts[2]
	}
	return id, op, controls, nil
}

// findPaged returns the paging control among a message's controls: the
// element and its decoded value.
func findPaged(raw []byte) (ctl berTLV, p pagedRequest, found bool) {
	_, _, controls, err := messageParts(raw)
	if err != nil || controls.end == 0 {
		return ctl, p, false
	}
	list, err := children(raw, controls)
	if err != nil {
		return ctl, p, false
	}
	for _, c := range list {
		fields, err := children(raw, c)
		if err != nil || len(fields) == 0 || fields[0].tag != 0x04 || string(raw[fields[0].vstart:fields[0].end]) != oidPaged {
			continue
		}
		last := fields[len(fields)-1]
		if last.tag != 0x04 {
			return ctl, p, false
		}
		val := raw[last.vstart:last.end]
		seq, err := readTLV(val, 0)
		if err != nil || seq.tag != 0x30 {
			return ctl, p, false
		}
		v, err := children(val, seq)
		if err != nil || len(v) != 2 || v[0].tag != 0x02 || v[1].tag != 0x04 || v[0].end-v[0].vstart > 4 {
			return ctl, p, false
		}
		for _, c := range val[v[0].vstart:v[0].end] {
			p.size = p.size<<8 | int(c)
		}
		p.cookie = string(val[v[1].vstart:v[1].end])
		return c, p, true
	}
	return ctl, p, false
}

func berLen(n int) []byte {
	switch {
	case n < 0x80:
		return []byte{byte(n)}
	case n < 0x100:
		return []byte{0x81, byte(n)}
	case n < 0x10000:
		return []byte{0x82, byte(n >> 8), byte(n)}
	case n < 0x1000000:
		return []byte{0x83, byte(n >> 16), byte(n >> 8), byte(n)}
	}
	return []byte{0x84, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
}

func berElem(tag byte, parts ...[]byte) []byte {
	v := slices.Concat(parts...)
	return slices.Concat([]byte{tag}, berLen(len(v)), v)
}

func berInt(n int) []byte {
	b := []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	for len(b) > 1 && b[0] == 0 && b[1]&0x80 == 0 {
		b = b[1:]
	}
	return berElem(0x02, b)
}

// restartPaged returns raw with its paging control asking for size
// entries from the start (empty cookie); everything else is unchanged.
func restartPaged(raw []byte, size int) ([]byte, error) {
	id, op, controls, err := messageParts(raw)
	if err != nil || controls.end == 0 {
		return nil, errBER
	}
	list, err := children(raw, controls)
	if err != nil {
		return nil, err
	}
	var ctls [][]byte
	for _, c := range list {
		fields, err := children(raw, c)
		if err != nil || len(fields) == 0 || string(raw[fields[0].vstart:fields[0].end]) != oidPaged {
			ctls = append(ctls, raw[c.start:c.end])
			continue
		}
		value := berElem(0x04, berElem(0x30, berInt(size), berElem(0x04)))
		parts := [][]byte{raw[fields[0].start:fields[0].end]}
		if len(fields) > 1 && fields[1].tag == 0x01 { // criticality
			parts = append(parts, raw[fields[1].start:fields[1].end])
		}
		ctls = append(ctls, berElem(0x30, append(parts, value)...))
	}
	return berElem(0x30, raw[id.start:id.end], raw[op.start:op.end], berElem(0xa0, ctls...)), nil
}

// pagedFor is what to send for o on b: its own bytes, or, for the next
// page of a paged search whose cookie another connection issued, the
// search restarted for the entries the client has plus one page.
func (ss *session) pagedFor(o *op, b *backend) []byte {
	o.base = 0
	if o.paged == nil || o.paged.cookie == "" {
		return o.m.Raw
	}
	ch, ok := ss.chains[o.paged.cookie]
	if !ok {
		return o.m.Raw
	}
	o.chainN = ch.n
	if ch.be == b || o.paged.size == 0 { // size 0 ends the paged search
		return o.m.Raw
	}
	raw, err := restartPaged(o.m.Raw, ch.n+o.paged.size)
	if err != nil {
		return o.m.Raw
	}
	o.base = ch.n
	ss.srv.log.Info("paged search restarted", ss.who("target", b.name, "skip", ch.n)...)
	return raw
}

// pagedDone remembers where the cookie of a finished page stands.
func (ss *session) pagedDone(o *op, b *backend, raw []byte) {
	_, p, ok := findPaged(raw)
	if !ok || p.cookie == "" {
		return
	}
	if ss.chains == nil {
		ss.chains = map[string]pagedChain{}
	}
	if _, known := ss.chains[p.cookie]; !known {
		ss.chainOrder = append(ss.chainOrder, p.cookie)
		if len(ss.chainOrder) > maxChains {
			delete(ss.chains, ss.chainOrder[0])
			ss.chainOrder = ss.chainOrder[1:]
		}
	}
	ss.chains[p.cookie] = pagedChain{n: o.chainN + o.forwarded, be: b}
}
