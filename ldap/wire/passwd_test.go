package wire_test

import (
	"testing"

	ber "github.com/go-asn1-ber/asn1-ber"

	"github.com/edgefleet/edgefleet/ldap/wire"
)

// passwdModifyPDU is a Password Modify request with newPasswd and, when
// ctl is not nil, that control.
func passwdModifyPDU(ctl *ber.Packet) []byte {
	msg := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "LDAPMessage")
	msg.AppendChild(ber.NewInteger(ber.ClassUniversal, ber.TypePrimitive, ber.TagInteger, int64(3), "id"))
	req := ber.Encode(ber.ClassApplication, ber.TypeConstructed, wire.TagExtendedRequest&0x1f, nil, "extended")
	req.AppendChild(ber.NewString(ber.ClassContext, ber.TypePrimitive, 0, wire.OIDPasswdModify, "requestName"))
	v := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "value")
	v.AppendChild(ber.NewString(ber.ClassContext, ber.TypePrimitive, 2, "new", "newPasswd"))
	req.AppendChild(ber.NewString(ber.ClassContext, ber.TypePrimitive, 1, string(v.Bytes()), "requestValue"))
	msg.AppendChild(req)
	if ctl != nil {
		ctls := ber.Encode(ber.ClassContext, ber.TypeConstructed, 0, nil, "controls")
		ctls.AppendChild(ctl)
		msg.AppendChild(ctls)
	}
	return msg.Bytes()
}

func control(oid string, crit bool, value []byte) *ber.Packet {
	c := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "control")
	c.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, oid, "type"))
	if crit {
		c.AppendChild(ber.NewBoolean(ber.ClassUniversal, ber.TypePrimitive, ber.TagBoolean, true, "criticality"))
	}
	c.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, string(value), "value"))
	return c
}

// The authorization identity of a Password Modify: a proxied
// authorization control's authzId (RFC 4370), the DN of its first
// version, none without one (another control does not count).
func TestParsePasswdModifyProxiedAuthz(t *testing.T) {
	v1 := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "ProxyAuthzV1")
	v1.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, "uid=bob,dc=example", "dn"))
	for _, tc := range []struct {
		name     string
		ctl      *ber.Packet
		proxy    string
		hasProxy bool
	}{
		{"none", nil, "", false},
		{"other control", control("1.2.840.113556.1.4.319", false, []byte("x")), "", false},
		{"RFC 4370", control(wire.OIDProxiedAuthz, true, []byte("dn:uid=bob,dc=example")), "dn:uid=bob,dc=example", true},
		{"RFC 4370 anonymous", control(wire.OIDProxiedAuthz, true, nil), "", true},
		{"first version", control(wire.OIDProxiedAuthzV1, true, v1.Bytes()), "dn:uid=bob,dc=example", true},
	} {
		pm, err := wire.ParsePasswdModify(passwdModifyPDU(tc.ctl))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if pm.Proxy != tc.proxy || pm.HasProxy != tc.hasProxy || string(pm.New) != "new" || pm.HasUser {
			t.Errorf("%s: %+v, want proxy %q (%v), new password", tc.name, pm, tc.proxy, tc.hasProxy)
		}
	}
}
