package wire

import "strings"

// Message is the shallow parse of one PDU: only what routing needs. Raw is
// the original bytes, forwarded unchanged.
type Message struct {
	Raw []byte
	ID  int32
	Op  byte // protocolOp tag

	// Bind request.
	BindName     string
	BindSimple   bool
	BindPassword []byte
	SASLMech     string
	SASLCreds    []byte

	// Search request: the base and the attribute names the filter mentions,
	// lower-cased, each once, in order of appearance; "" stands for an
	// extensible match without a type, which tests every attribute.
	BaseObject  string
	FilterAttrs []string

	AbandonID int32  // abandon request
	ExtOID    string // extended request (requestName) or response (responseName), intermediate response (responseName)

	// Any response carrying an LDAPResult.
	ResultCode int
	MatchedDN  string
	Diagnostic string

	// Target DN of compare (both fields), add, modify, delete and modrdn
	// requests, and the objectName of a search result entry (EntryDN).
	CompareDN string
	EntryDN   string

	filterAttrSet map[string]struct{} // FilterAttrs as a set, once there are many
}

// MaxFilterDepth is the number of levels a search filter tree may have: a
// lone (cn=x) is 1 level, (!(cn=x)) is 2. Deeper filters are ErrMalformed
// (they only serve to exhaust a server's stack).
const MaxFilterDepth = 64

// Parse decodes the parts of an LDAPMessage that routing needs. raw must be
// exactly one PDU (as returned by Reader.Next). Raw, BindPassword and
// SASLCreds alias raw (the strings are copies): clone a Reader's slice
// before parsing it if the Message outlives the next Reader.Next.
// Unknown protocolOp tags are not an error (the element is checked for
// framing only); structure errors in known operations are *ProtocolError.
func Parse(raw []byte) (*Message, error) {
	m := new(Message)
	if err := ParseInto(m, raw); err != nil {
		return nil, err
	}
	return m, nil
}

// ParseInto is Parse into a Message the caller owns (and may reuse: m is
// overwritten whole), for a caller that needs the Message only until it
// parses the next PDU and would rather not allocate one per PDU. After an
// error m holds what was decoded before it.
func ParseInto(m *Message, raw []byte) error {
	*m = Message{Raw: raw}
	top := &decoder{b: raw}
	outer, err := top.expect(0x30, "LDAPMessage")
	if err != nil {
		return err
	}
	if top.more() {
		return malformed(top.pos, "%d bytes after the LDAPMessage", len(raw)-top.pos)
	}
	d := outer.inner()
	idEl, err := d.expect(0x02, "messageID")
	if err != nil {
		return err
	}
	if m.ID, err = idEl.uint31("messageID"); err != nil {
		return err
	}
	op, err := d.next()
	if err != nil {
		return err
	}
	m.Op = op.tag
	if op.tag&0xc0 != 0x40 {
		return malformed(op.off, "protocolOp tag 0x%02x is not application class", op.tag)
	}
	if err := m.parseOp(op); err != nil {
		return err
	}
	// Controls ([0]) and anything a later LDAP version may add: framing only.
	for d.more() {
		if _, err := d.next(); err != nil {
			return err
		}
	}
	return nil
}

func (m *Message) parseOp(op tlv) error {
	constructed := op.tag&0x20 != 0
	switch op.tag {
	case TagUnbindRequest:
		return nil // NULL; content is ignored as servers do
	case TagDelRequest:
		m.EntryDN = string(op.value)
		return nil
	case TagAbandonRequest:
		id, err := op.uint31("abandon messageID")
		m.AbandonID = id
		return err
	}
	if !constructed {
		return nil // unknown primitive op
	}
	d := op.inner()
	switch op.tag {
	case TagBindRequest:
		return m.parseBind(d)
	case TagSearchRequest:
		return m.parseSearch(d)
	case TagAddRequest, TagModifyRequest, TagModDNRequest:
		dn, err := d.expect(0x04, "entry")
		m.EntryDN = string(dn.value)
		return err
	case TagCompareRequest:
		dn, err := d.expect(0x04, "entry")
		m.CompareDN = string(dn.value)
		m.EntryDN = m.CompareDN
		return err
	case TagSearchResultEntry:
		dn, err := d.expect(0x04, "objectName")
		m.EntryDN = string(dn.value)
		return err
	case TagExtendedRequest:
		name, err := d.expect(0x80, "requestName")
		m.ExtOID = string(name.value)
		return err
	case TagIntermediateResponse:
		if d.peekTag() == 0x80 {
			name, err := d.next()
			m.ExtOID = string(name.value)
			return err
		}
		return nil
	case TagBindResponse, TagSearchResultDone, TagModifyResponse, TagAddResponse,
		TagDelResponse, TagModDNResponse, TagCompareResponse, TagExtendedResponse:
		return m.parseResult(d, op.tag == TagExtendedResponse)
	}
	return nil
}

func (m *Message) parseBind(d *decoder) error {
	if _, err := d.expect(0x02, "bind version"); err != nil {
		return err
	}
	name, err := d.expect(0x04, "bind name")
	if err != nil {
		return err
	}
	m.BindName = string(name.value)
	auth, err := d.next()
	if err != nil {
		return err
	}
	switch auth.tag {
	case 0x80: // simple [0]
		m.BindSimple = true
		m.BindPassword = auth.value
	case 0xa3: // sasl [3]
		s := auth.inner()
		mech, err := s.expect(0x04, "sasl mechanism")
		if err != nil {
			return err
		}
		m.SASLMech = string(mech.value)
		if s.more() {
			creds, err := s.expect(0x04, "sasl credentials")
			if err != nil {
				return err
			}
			m.SASLCreds = creds.value
		}
	default:
		// Other methods (e.g. the reserved [1], [2]) go to the server,
		// which answers authMethodNotSupported.
	}
	return nil
}

func (m *Message) parseSearch(d *decoder) error {
	base, err := d.expect(0x04, "baseObject")
	if err != nil {
		return err
	}
	m.BaseObject = string(base.value)
	for _, f := range []struct {
		tag  byte
		what string
	}{{0x0a, "scope"}, {0x0a, "derefAliases"}, {0x02, "sizeLimit"}, {0x02, "timeLimit"}, {0x01, "typesOnly"}} {
		if _, err := d.expect(f.tag, f.what); err != nil {
			return err
		}
	}
	filter, err := d.next()
	if err != nil {
		return err
	}
	err = m.walkFilter(filter, 0)
	m.filterAttrSet = nil // only needed while walking; ops stay pending a while
	if err != nil {
		return err
	}
	_, err = d.expect(0x30, "attributes")
	return err
}

// walkFilter collects the attribute names of a Filter (RFC 4511 §4.5.1).
// depth counts the and/or/not elements enclosing f.
func (m *Message) walkFilter(f tlv, depth int) error {
	if depth >= MaxFilterDepth {
		return malformed(f.off, "filter nested deeper than %d levels", MaxFilterDepth)
	}
	switch f.tag {
	case 0xa0, 0xa1: // and, or
		d := f.inner()
		for d.more() {
			sub, err := d.next()
			if err != nil {
				return err
			}
			if err := m.walkFilter(sub, depth+1); err != nil {
				return err
			}
		}
		return nil
	case 0xa2: // not
		d := f.inner()
		sub, err := d.next()
		if err != nil {
			return err
		}
		return m.walkFilter(sub, depth+1)
	case 0xa3, 0xa5, 0xa6, 0xa8, 0xa4: // equality, >=, <=, approx, substrings
		d := f.inner()
		attr, err := d.expect(0x04, "filter attribute")
		if err != nil {
			return err
		}
		m.addFilterAttr(attr.value)
		return nil
	case 0x87: // present
		m.addFilterAttr(f.value)
		return nil
	case 0xa9: // extensibleMatch: type [2] is optional
		d := f.inner()
		typed := false
		for d.more() {
			e, err := d.next()
			if err != nil {
				return err
			}
			if e.tag == 0x82 {
				m.addFilterAttr(e.value)
				typed = true
			}
		}
		if !typed {
			m.addFilterAttr(nil) // "": every attribute the matching rule applies to
		}
		return nil
	}
	return malformed(f.off, "unknown filter choice 0x%02x", f.tag)
}

// filterAttrScan is how many attributes are deduplicated by a scan; past
// it a set takes over, so a filter naming many attributes costs linear
// time (a 256 KiB filter from an anonymous client holds some 30,000).
const filterAttrScan = 16

func (m *Message) addFilterAttr(b []byte) {
	a := strings.ToLower(string(b))
	if m.filterAttrSet != nil {
		if _, dup := m.filterAttrSet[a]; dup {
			return
		}
		m.filterAttrSet[a] = struct{}{}
		m.FilterAttrs = append(m.FilterAttrs, a)
		return
	}
	for _, x := range m.FilterAttrs {
		if x == a {
			return
		}
	}
	m.FilterAttrs = append(m.FilterAttrs, a)
	if len(m.FilterAttrs) > filterAttrScan {
		m.filterAttrSet = make(map[string]struct{}, 2*len(m.FilterAttrs))
		for _, x := range m.FilterAttrs {
			m.filterAttrSet[x] = struct{}{}
		}
	}
}

func (m *Message) parseResult(d *decoder, extended bool) error {
	code, err := d.expect(0x0a, "resultCode")
	if err != nil {
		return err
	}
	if m.ResultCode, err = code.int("resultCode"); err != nil {
		return err
	}
	matched, err := d.expect(0x04, "matchedDN")
	if err != nil {
		return err
	}
	m.MatchedDN = string(matched.value)
	diag, err := d.expect(0x04, "diagnosticMessage")
	if err != nil {
		return err
	}
	m.Diagnostic = string(diag.value)
	for d.more() {
		e, err := d.next()
		if err != nil {
			return err
		}
		if extended && e.tag == 0x8a { // responseName [10]
			m.ExtOID = string(e.value)
		}
	}
	return nil
}
