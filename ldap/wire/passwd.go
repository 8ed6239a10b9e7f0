package wire

// Password changes, read so that the core can re-bind a session whose
// user changed their own password: the Password Modify extended operation
// (RFC 3062) and the changes of a modify request (RFC 4511 §4.6). Only
// the core's bookkeeping reads them, after the server accepted the
// change; the requests are forwarded as they arrived.

// OIDPasswdModify is the Password Modify extended operation (RFC 3062).
const OIDPasswdModify = "1.3.6.1.4.1.4203.1.11.1"

// PasswdModify is what a Password Modify request asks: whose password
// (User, when HasUser; else the request's authorization identity's) and
// the new one (New, when HasNew; else the server generates one and
// returns it). The authorization identity is the bound one unless the
// request carries a proxied authorization control (RFC 4370, or its
// first version): then it is the control's (Proxy, when HasProxy: an
// authzId such as "dn:uid=bob,…", "" for anonymous).
type PasswdModify struct {
	User     string
	HasUser  bool
	New      []byte
	HasNew   bool
	Proxy    string
	HasProxy bool
}

// OIDProxiedAuthz is the proxied authorization control (RFC 4370), whose
// value is an authzId; OIDProxiedAuthzV1 its first version, whose value
// is a SEQUENCE holding a DN.
const (
	OIDProxiedAuthz   = "2.16.840.1.113730.3.4.18"
	OIDProxiedAuthzV1 = "2.16.840.1.113730.3.4.12"
)

// ParsePasswdModify reads the request value of raw, a Password Modify
// extended request. New aliases raw.
func ParsePasswdModify(raw []byte) (PasswdModify, error) {
	var pm PasswdModify
	op, err := protocolOp(raw, TagExtendedRequest)
	if err != nil {
		return pm, err
	}
	d := op.inner()
	if _, err := d.expect(0x80, "requestName"); err != nil {
		return pm, err
	}
	if pm.Proxy, pm.HasProxy, err = proxiedAuthz(raw); err != nil {
		return pm, err
	}
	if !d.more() {
		return pm, nil // no value: the authorization identity, a generated password
	}
	val, err := d.expect(0x81, "requestValue")
	if err != nil {
		return pm, err
	}
	seq, err := (&decoder{b: val.value, base: val.voff}).expect(0x30, "PasswdModifyRequestValue")
	if err != nil {
		return pm, err
	}
	for f := seq.inner(); f.more(); {
		e, err := f.next()
		if err != nil {
			return pm, err
		}
		switch e.tag {
		case 0x80:
			pm.User, pm.HasUser = string(e.value), true
		case 0x82:
			pm.New, pm.HasNew = e.value, true
		}
	}
	return pm, nil
}

// GeneratedPasswd reads genPasswd from raw, a Password Modify extended
// response; false when it carries none. The password aliases raw.
func GeneratedPasswd(raw []byte) ([]byte, bool) {
	op, err := protocolOp(raw, TagExtendedResponse)
	if err != nil {
		return nil, false
	}
	for d := op.inner(); d.more(); {
		e, err := d.next()
		if err != nil {
			return nil, false
		}
		if e.tag != 0x8b { // responseValue [11]
			continue
		}
		seq, err := (&decoder{b: e.value, base: e.voff}).expect(0x30, "PasswdModifyResponseValue")
		if err != nil {
			return nil, false
		}
		for f := seq.inner(); f.more(); {
			g, err := f.next()
			if err != nil {
				return nil, false
			}
			if g.tag == 0x80 {
				return g.value, true
			}
		}
	}
	return nil, false
}

// Modify operations of a Change (RFC 4511 §4.6).
const (
	ModAdd     = 0
	ModDelete  = 1
	ModReplace = 2
)

// A Change is one change of a modify request: its operation (ModAdd,
// ModDelete, ModReplace), the attribute description as written, and the
// values (aliasing the request).
type Change struct {
	Op     int
	Attr   string
	Values [][]byte
}

// ModifyChanges reads the changes of raw, a modify request, in order.
func ModifyChanges(raw []byte) ([]Change, error) {
	op, err := protocolOp(raw, TagModifyRequest)
	if err != nil {
		return nil, err
	}
	d := op.inner()
	if _, err := d.expect(0x04, "object"); err != nil {
		return nil, err
	}
	list, err := d.expect(0x30, "changes")
	if err != nil {
		return nil, err
	}
	var out []Change
	for l := list.inner(); l.more(); {
		ch, err := l.expect(0x30, "change")
		if err != nil {
			return nil, err
		}
		c := ch.inner()
		kind, err := c.expect(0x0a, "operation")
		if err != nil {
			return nil, err
		}
		n, err := kind.int("operation")
		if err != nil {
			return nil, err
		}
		mod, err := c.expect(0x30, "modification")
		if err != nil {
			return nil, err
		}
		m := mod.inner()
		typ, err := m.expect(0x04, "type")
		if err != nil {
			return nil, err
		}
		vals, err := m.expect(0x31, "vals")
		if err != nil {
			return nil, err
		}
		chg := Change{Op: n, Attr: string(typ.value)}
		for v := vals.inner(); v.more(); {
			e, err := v.expect(0x04, "value")
			if err != nil {
				return nil, err
			}
			chg.Values = append(chg.Values, e.value)
		}
		out = append(out, chg)
	}
	return out, nil
}

// protocolOp is the protocolOp element of raw, which must carry tag.
func protocolOp(raw []byte, tag byte) (tlv, error) {
	outer, err := (&decoder{b: raw}).expect(0x30, "LDAPMessage")
	if err != nil {
		return tlv{}, err
	}
	d := outer.inner()
	if _, err := d.expect(0x02, "messageID"); err != nil {
		return tlv{}, err
	}
	return d.expect(tag, OpName(tag))
}

// proxiedAuthz returns the authorization identity of raw's proxied
// authorization control, when it has one.
func proxiedAuthz(raw []byte) (string, bool, error) {
	_, _, controls, ok, err := parts(raw)
	if err != nil || !ok {
		return "", false, err
	}
	for d := controls.inner(); d.more(); {
		c, err := d.next()
		if err != nil {
			return "", false, err
		}
		f := c.inner()
		typ, err := f.expect(0x04, "controlType")
		if err != nil {
			return "", false, err
		}
		if oid := string(typ.value); oid != OIDProxiedAuthz && oid != OIDProxiedAuthzV1 {
			continue
		}
		var value []byte
		for f.more() {
			e, err := f.next()
			if err != nil {
				return "", false, err
			}
			if e.tag == 0x04 {
				value = e.value
			}
		}
		if string(typ.value) == OIDProxiedAuthz {
			return string(value), true, nil
		}
		seq, err := (&decoder{b: value}).expect(0x30, "ProxyAuthzV1 value")
		if err != nil {
			return "", false, err
		}
		dn, err := seq.inner().expect(0x04, "proxyDN")
		if err != nil {
			return "", false, err
		}
		return "dn:" + string(dn.value), true, nil
	}
	return "", false, nil
}
