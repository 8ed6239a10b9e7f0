package wire

// The builders below produce the few PDUs the core writes itself, in
// minimal DER-style encoding.

// appendHeader appends an identifier and a minimal definite length.
func appendHeader(b []byte, tag byte, n int) []byte {
	b = append(b, tag)
	switch {
	case n < 0x80:
		return append(b, byte(n))
	case n <= 0xff:
		return append(b, 0x81, byte(n))
	case n <= 0xffff:
		return append(b, 0x82, byte(n>>8), byte(n))
	case n <= 0xffffff:
		return append(b, 0x83, byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, 0x84, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func tlvBytes(tag byte, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	b := appendHeader(make([]byte, 0, n+6), tag, n)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func str(tag byte, s string) []byte { return tlvBytes(tag, []byte(s)) }

// integer encodes a non-negative or negative int minimally (two's complement).
func integer(tag byte, v int64) []byte {
	var buf [8]byte
	n := 8
	for i := 7; i >= 0; i-- {
		buf[i] = byte(v)
		v >>= 8
	}
	start := 0
	for start < n-1 {
		// Drop a leading octet when the next one's top bit says the same.
		if buf[start] == 0x00 && buf[start+1]&0x80 == 0 || buf[start] == 0xff && buf[start+1]&0x80 != 0 {
			start++
			continue
		}
		break
	}
	return tlvBytes(tag, buf[start:])
}

func message(id int32, op []byte) []byte {
	return tlvBytes(0x30, integer(0x02, int64(id)), op)
}

// BindRequest is an LDAPv3 simple bind.
func BindRequest(id int32, name string, password []byte) []byte {
	return message(id, tlvBytes(TagBindRequest, integer(0x02, 3), str(0x04, name), tlvBytes(0x80, password)))
}

// UnbindRequest is an unbind.
func UnbindRequest(id int32) []byte {
	return message(id, []byte{TagUnbindRequest, 0})
}

func ldapResult(code int, matchedDN, diag string) [][]byte {
	return [][]byte{integer(0x0a, int64(code)), str(0x04, matchedDN), str(0x04, diag)}
}

// Result is a response carrying only an LDAPResult: BindResponse,
// SearchResultDone, ModifyResponse, AddResponse, DelResponse,
// ModDNResponse, CompareResponse. For an ExtendedResponse use
// ExtendedResult.
func Result(id int32, respTag byte, code int, matchedDN, diag string) []byte {
	return message(id, tlvBytes(respTag, ldapResult(code, matchedDN, diag)...))
}

// ExtendedResult is an ExtendedResponse; oid "" leaves out responseName.
func ExtendedResult(id int32, code int, diag string, oid string) []byte {
	parts := ldapResult(code, "", diag)
	if oid != "" {
		parts = append(parts, str(0x8a, oid))
	}
	return message(id, tlvBytes(TagExtendedResponse, parts...))
}

// NoticeOfDisconnection is the unsolicited notification (RFC 4511 §4.4.1)
// sent before closing a connection on bad input: message id 0.
func NoticeOfDisconnection(code int, diag string) []byte {
	return ExtendedResult(0, code, diag, OIDNoticeOfDisconnection)
}

// RootDSESearch reads the root DSE (base "", scope base, (objectClass=*))
// asking for no attributes ("1.1"): the cheapest real operation a backend
// must answer, used by the monitor.
func RootDSESearch(id int32) []byte {
	return message(id, tlvBytes(TagSearchRequest,
		str(0x04, ""),
		integer(0x0a, 0), // baseObject
		integer(0x0a, 0), // neverDerefAliases
		integer(0x02, 1), // sizeLimit
		integer(0x02, 0), // timeLimit
		[]byte{0x01, 0x01, 0x00},
		str(0x87, "objectClass"),
		tlvBytes(0x30, str(0x04, "1.1")),
	))
}

// WhoAmIRequest is the WhoAmI extended request (RFC 4532): the smallest
// operation a server must answer, used by the agent's probe to prove the
// origin accepted its client certificate.
func WhoAmIRequest(id int32) []byte {
	return message(id, tlvBytes(TagExtendedRequest, str(0x80, OIDWhoAmI)))
}

// WithID returns the same PDU with another message id. Only the id is
// re-encoded; the protocolOp and controls are copied byte for byte.
func WithID(raw []byte, id int32) ([]byte, error) {
	if _, err := Parse(raw); err != nil {
		return nil, err
	}
	top := &decoder{b: raw}
	outer, _ := top.next()
	d := outer.inner()
	_, _ = d.next() // the old id
	rest := d.b[d.pos:]
	return tlvBytes(0x30, integer(0x02, int64(id)), rest), nil
}
