package wire_test

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	ber "github.com/go-asn1-ber/asn1-ber"
	"github.com/go-ldap/ldap/v3"

	"github.com/edgefleet/edgefleet/ldap/wire"
)

// Reference PDUs are built with go-asn1-ber and go-ldap's filter compiler,
// independently of the package's own builders.

func seq(children ...*ber.Packet) *ber.Packet {
	p := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "")
	for _, c := range children {
		p.AppendChild(c)
	}
	return p
}

func app(tag ber.Tag, children ...*ber.Packet) *ber.Packet {
	p := ber.Encode(ber.ClassApplication, ber.TypeConstructed, tag, nil, "")
	for _, c := range children {
		p.AppendChild(c)
	}
	return p
}

func appPrim(tag ber.Tag, value string) *ber.Packet {
	return ber.NewString(ber.ClassApplication, ber.TypePrimitive, tag, value, "")
}

func octets(s string) *ber.Packet {
	return ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, s, "")
}

func integer(v int64) *ber.Packet {
	return ber.NewInteger(ber.ClassUniversal, ber.TypePrimitive, ber.TagInteger, v, "")
}

func enum(v int64) *ber.Packet {
	return ber.NewInteger(ber.ClassUniversal, ber.TypePrimitive, ber.TagEnumerated, v, "")
}

func ctx(tag ber.Tag, s string) *ber.Packet {
	return ber.NewString(ber.ClassContext, ber.TypePrimitive, tag, s, "")
}

func ctxCons(tag ber.Tag, children ...*ber.Packet) *ber.Packet {
	p := ber.Encode(ber.ClassContext, ber.TypeConstructed, tag, nil, "")
	for _, c := range children {
		p.AppendChild(c)
	}
	return p
}

func msg(id int64, op *ber.Packet, extra ...*ber.Packet) []byte {
	return seq(append([]*ber.Packet{integer(id), op}, extra...)...).Bytes()
}

func filter(t *testing.T, f string) *ber.Packet {
	t.Helper()
	p, err := ldap.CompileFilter(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func search(t *testing.T, id int64, base, f string) []byte {
	return msg(id, app(ber.Tag(3), octets(base), enum(2), enum(0), integer(0), integer(0),
		ber.NewBoolean(ber.ClassUniversal, ber.TypePrimitive, ber.TagBoolean, false, ""),
		filter(t, f), seq(octets("cn"))))
}

func nested(depth int) string {
	return strings.Repeat("(!", depth) + "(cn=x)" + strings.Repeat(")", depth)
}

func result(tag ber.Tag, code int64, matched, diag string, extra ...*ber.Packet) *ber.Packet {
	return app(tag, append([]*ber.Packet{enum(code), octets(matched), octets(diag)}, extra...)...)
}

func TestParse(t *testing.T) {
	paging := ldap.NewControlPaging(100).Encode()
	tests := []struct {
		name string
		raw  []byte
		want wire.Message // Raw is filled in by the test
	}{
		{"simple bind", msg(1, app(0, integer(3), octets("cn=Admin,o=pqr"), ctx(0, "secret"))),
			wire.Message{ID: 1, Op: wire.TagBindRequest, BindName: "cn=Admin,o=pqr", BindSimple: true, BindPassword: []byte("secret")}},
		{"anonymous bind", msg(2, app(0, integer(3), octets(""), ctx(0, ""))),
			wire.Message{ID: 2, Op: wire.TagBindRequest, BindSimple: true, BindPassword: []byte{}}},
		{"sasl bind, first step", msg(3, app(0, integer(3), octets(""), ctxCons(3, octets("SCRAM-SHA-256")))),
			wire.Message{ID: 3, Op: wire.TagBindRequest, SASLMech: "SCRAM-SHA-256"}},
		{"sasl bind with creds", msg(4, app(0, integer(3), octets(""), ctxCons(3, octets("PLAIN"), octets("\x00u\x00p")))),
			wire.Message{ID: 4, Op: wire.TagBindRequest, SASLMech: "PLAIN", SASLCreds: []byte("\x00u\x00p")}},
		{"max message id", msg(0x7fffffff, appPrim(2, "")),
			wire.Message{ID: 0x7fffffff, Op: wire.TagUnbindRequest}},
		{"search", search(t, 5, "ou=People,o=pqr", "(&(objectClass=person)(|(CN=J*)(!(uid=x))(mail>=a)(sn<=b)(cn~=c)(description=*)(sn:caseExactMatch:=Y)(:dn:2.5.13.5:=z)))"),
			wire.Message{ID: 5, Op: wire.TagSearchRequest, BaseObject: "ou=People,o=pqr", FilterAttrs: []string{"objectclass", "cn", "uid", "mail", "sn", "description", ""}}},
		{"search with paging control", msg(6, app(3, octets("o=pqr"), enum(2), enum(0), integer(0), integer(0),
			ber.NewBoolean(ber.ClassUniversal, ber.TypePrimitive, ber.TagBoolean, false, ""), filter(t, "(uid=a)"), seq()),
			ctxCons(0, paging)),
			wire.Message{ID: 6, Op: wire.TagSearchRequest, BaseObject: "o=pqr", FilterAttrs: []string{"uid"}}},
		{"filter 64 levels deep", search(t, 7, "", nested(63)),
			wire.Message{ID: 7, Op: wire.TagSearchRequest, FilterAttrs: []string{"cn"}}},
		{"abandon", msg(8, ber.NewInteger(ber.ClassApplication, ber.TypePrimitive, 16, int64(5), "")),
			wire.Message{ID: 8, Op: wire.TagAbandonRequest, AbandonID: 5}},
		{"delete", msg(9, appPrim(10, "uid=a,o=pqr")),
			wire.Message{ID: 9, Op: wire.TagDelRequest, EntryDN: "uid=a,o=pqr"}},
		{"add", msg(10, app(8, octets("uid=b,o=pqr"), seq(seq(octets("objectClass"), ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSet, nil, ""))))),
			wire.Message{ID: 10, Op: wire.TagAddRequest, EntryDN: "uid=b,o=pqr"}},
		{"modify", msg(11, app(6, octets("uid=c,o=pqr"), seq())),
			wire.Message{ID: 11, Op: wire.TagModifyRequest, EntryDN: "uid=c,o=pqr"}},
		{"modrdn", msg(12, app(12, octets("uid=d,o=pqr"), octets("uid=e"), ber.NewBoolean(ber.ClassUniversal, ber.TypePrimitive, ber.TagBoolean, true, ""))),
			wire.Message{ID: 12, Op: wire.TagModDNRequest, EntryDN: "uid=d,o=pqr"}},
		{"compare", msg(13, app(14, octets("uid=f,o=pqr"), seq(octets("sn"), octets("x")))),
			wire.Message{ID: 13, Op: wire.TagCompareRequest, CompareDN: "uid=f,o=pqr", EntryDN: "uid=f,o=pqr"}},
		{"whoami", msg(14, app(23, ctx(0, wire.OIDWhoAmI))),
			wire.Message{ID: 14, Op: wire.TagExtendedRequest, ExtOID: wire.OIDWhoAmI}},
		{"extended with value", msg(15, app(23, ctx(0, "1.3.6.1.4.1.4203.1.11.1"), ctx(1, "\x30\x00"))),
			wire.Message{ID: 15, Op: wire.TagExtendedRequest, ExtOID: "1.3.6.1.4.1.4203.1.11.1"}},
		{"bind response with sasl creds", msg(16, result(1, 14, "", "go on", ctx(7, "challenge"))),
			wire.Message{ID: 16, Op: wire.TagBindResponse, ResultCode: 14, Diagnostic: "go on"}},
		{"search done with referral", msg(17, result(5, 10, "o=pqr", "see", ctxCons(3, octets("ldap://x/")))),
			wire.Message{ID: 17, Op: wire.TagSearchResultDone, ResultCode: 10, MatchedDN: "o=pqr", Diagnostic: "see"}},
		{"search entry", msg(18, app(4, octets("uid=a,o=pqr"), seq())),
			wire.Message{ID: 18, Op: wire.TagSearchResultEntry, EntryDN: "uid=a,o=pqr"}},
		{"search reference", msg(19, app(19, octets("ldap://x/o=pqr"))),
			wire.Message{ID: 19, Op: wire.TagSearchResultReference}},
		{"notice of disconnection", msg(0, result(24, 2, "", "bye", ctx(10, wire.OIDNoticeOfDisconnection))),
			wire.Message{ID: 0, Op: wire.TagExtendedResponse, ResultCode: 2, Diagnostic: "bye", ExtOID: wire.OIDNoticeOfDisconnection}},
		{"intermediate response", msg(20, app(25, ctx(0, "1.3.6.1.4.1.4203.1.9.1.4"))),
			wire.Message{ID: 20, Op: wire.TagIntermediateResponse, ExtOID: "1.3.6.1.4.1.4203.1.9.1.4"}},
		{"unknown operation", msg(21, app(30, octets("?"))),
			wire.Message{ID: 21, Op: 0x7e}},
		{"non-minimal lengths and id", []byte{0x30, 0x84, 0, 0, 0, 0x16, 0x02, 0x82, 0, 3, 0, 0, 9,
			0x60, 0x81, 0x0c, 0x02, 0x01, 0x03, 0x04, 0x83, 0, 0, 1, 'a', 0x80, 0x81, 0x00},
			wire.Message{ID: 9, Op: wire.TagBindRequest, BindName: "a", BindSimple: true, BindPassword: []byte{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := wire.Parse(tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Raw = tc.raw
			if m.BindPassword == nil && tc.want.BindPassword != nil && len(tc.want.BindPassword) == 0 {
				m.BindPassword = []byte{}
			}
			if !equal(m, &tc.want) {
				t.Errorf("got  %+v\nwant %+v", *m, tc.want)
			}
		})
	}
}

func equal(a, b *wire.Message) bool {
	return bytes.Equal(a.Raw, b.Raw) && a.ID == b.ID && a.Op == b.Op &&
		a.BindName == b.BindName && a.BindSimple == b.BindSimple && bytes.Equal(a.BindPassword, b.BindPassword) &&
		(a.BindPassword == nil) == (b.BindPassword == nil) &&
		a.SASLMech == b.SASLMech && bytes.Equal(a.SASLCreds, b.SASLCreds) &&
		a.BaseObject == b.BaseObject && slices.Equal(a.FilterAttrs, b.FilterAttrs) &&
		a.AbandonID == b.AbandonID && a.ExtOID == b.ExtOID && a.ResultCode == b.ResultCode &&
		a.MatchedDN == b.MatchedDN && a.Diagnostic == b.Diagnostic && a.CompareDN == b.CompareDN && a.EntryDN == b.EntryDN
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte
		kind error
	}{
		{"empty", nil, wire.ErrMalformed},
		{"not a sequence", []byte{0x31, 0x03, 0x02, 0x01, 0x01}, wire.ErrMalformed},
		{"trailing bytes", append(wire.UnbindRequest(1), 0), wire.ErrMalformed},
		{"length beyond the data", []byte{0x30, 0x09, 0x02, 0x01, 0x01, 0x42, 0x00}, wire.ErrMalformed},
		{"indefinite inside", []byte{0x30, 0x06, 0x02, 0x01, 0x01, 0x63, 0x80, 0x00}, wire.ErrIndefinite},
		{"negative id", []byte{0x30, 0x05, 0x02, 0x01, 0xff, 0x42, 0x00}, wire.ErrMalformed},
		{"id beyond maxInt", []byte{0x30, 0x09, 0x02, 0x05, 0x00, 0x80, 0, 0, 0, 0x42, 0x00}, wire.ErrMalformed},
		{"empty id", []byte{0x30, 0x04, 0x02, 0x00, 0x42, 0x00}, wire.ErrMalformed},
		{"no operation", []byte{0x30, 0x03, 0x02, 0x01, 0x01}, wire.ErrMalformed},
		{"universal-class operation", []byte{0x30, 0x05, 0x02, 0x01, 0x01, 0x04, 0x00}, wire.ErrMalformed},
		{"high tag number", []byte{0x30, 0x06, 0x02, 0x01, 0x01, 0x7f, 0x21, 0x00}, wire.ErrMalformed},
		{"bind without name", msg(1, app(0, integer(3))), wire.ErrMalformed},
		{"bind name constructed", msg(1, app(0, integer(3), ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagOctetString, nil, ""), ctx(0, ""))), wire.ErrMalformed},
		{"search filter 65 levels deep", search(t, 1, "", nested(64)), wire.ErrMalformed},
		{"search filter and/or 65 levels deep", search(t, 1, "", strings.Repeat("(&(|", 32)+"(cn=x)"+strings.Repeat("))", 32)), wire.ErrMalformed},
		{"search unknown filter", msg(1, app(3, octets(""), enum(0), enum(0), integer(0), integer(0),
			ber.NewBoolean(ber.ClassUniversal, ber.TypePrimitive, ber.TagBoolean, false, ""), ctx(12, "x"), seq())), wire.ErrMalformed},
		{"search truncated", msg(1, app(3, octets(""), enum(0))), wire.ErrMalformed},
		{"abandon negative", msg(1, ber.NewInteger(ber.ClassApplication, ber.TypePrimitive, 16, int64(-1), "")), wire.ErrMalformed},
		{"result without diagnostic", msg(1, app(5, enum(0), octets(""))), wire.ErrMalformed},
		{"extended without name", msg(1, app(23)), wire.ErrMalformed},
		{"bad control framing", append(wire.UnbindRequest(1)[:len(wire.UnbindRequest(1))], 0), wire.ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := wire.Parse(tc.raw)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v (msg %+v), want %v", err, m, tc.kind)
			}
			var pe *wire.ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("%T is not a *ProtocolError", err)
			}
		})
	}
}

// TestBuilders decodes every built PDU with go-asn1-ber (an independent
// decoder) and with Parse.
func TestBuilders(t *testing.T) {
	long := strings.Repeat("d", 70000)
	tests := []struct {
		name  string
		raw   []byte
		check func(t *testing.T, p *ber.Packet, m *wire.Message)
	}{
		{"bind", wire.BindRequest(1, "cn=a,o=b", []byte("pw")), func(t *testing.T, p *ber.Packet, m *wire.Message) {
			op := p.Children[1]
			if op.Tag != 0 || op.Children[0].Value.(int64) != 3 || op.Children[1].Value != "cn=a,o=b" || op.Children[2].Data.String() != "pw" {
				t.Errorf("bind decoded as %v", op.Children)
			}
			if m.BindName != "cn=a,o=b" || string(m.BindPassword) != "pw" {
				t.Errorf("parsed %+v", m)
			}
		}},
		{"unbind", wire.UnbindRequest(300), func(t *testing.T, p *ber.Packet, m *wire.Message) {
			if p.Children[0].Value.(int64) != 300 || p.Children[1].Tag != 2 || m.Op != wire.TagUnbindRequest {
				t.Errorf("unbind decoded as %v", p.Children)
			}
		}},
		{"result", wire.Result(0x7fffffff, wire.TagSearchResultDone, 52, "o=x", "no server"), func(t *testing.T, p *ber.Packet, m *wire.Message) {
			op := p.Children[1]
			if p.Children[0].Value.(int64) != 0x7fffffff || op.Tag != 5 || op.Children[0].Value.(int64) != 52 ||
				op.Children[1].Value != "o=x" || op.Children[2].Value != "no server" {
				t.Errorf("result decoded as %v", op.Children)
			}
			if m.ResultCode != 52 || m.MatchedDN != "o=x" || m.Diagnostic != "no server" {
				t.Errorf("parsed %+v", m)
			}
		}},
		{"result with a long diagnostic", wire.Result(2, wire.TagAddResponse, 80, "", long), func(t *testing.T, p *ber.Packet, m *wire.Message) {
			if m.Diagnostic != long || p.Children[1].Children[2].Value != long {
				t.Errorf("long diagnostic lost")
			}
		}},
		{"extended result", wire.ExtendedResult(3, 0, "", wire.OIDStartTLS), func(t *testing.T, p *ber.Packet, m *wire.Message) {
			op := p.Children[1]
			if op.Tag != 24 || len(op.Children) != 4 || op.Children[3].Tag != 10 || op.Children[3].Data.String() != wire.OIDStartTLS {
				t.Errorf("extended decoded as %v", op.Children)
			}
			if m.ExtOID != wire.OIDStartTLS {
				t.Errorf("parsed %+v", m)
			}
		}},
		{"notice of disconnection", wire.NoticeOfDisconnection(wire.ResultProtocolError, "bad pdu"), func(t *testing.T, p *ber.Packet, m *wire.Message) {
			if m.ID != 0 || m.ResultCode != 2 || m.ExtOID != wire.OIDNoticeOfDisconnection || m.Diagnostic != "bad pdu" {
				t.Errorf("parsed %+v", m)
			}
		}},
		{"whoami request", wire.WhoAmIRequest(4), func(t *testing.T, p *ber.Packet, m *wire.Message) {
			op := p.Children[1]
			if op.Tag != 23 || len(op.Children) != 1 || op.Children[0].Tag != 0 || op.Children[0].Data.String() != wire.OIDWhoAmI {
				t.Errorf("whoami decoded as %v", op.Children)
			}
			if m.ID != 4 || m.Op != wire.TagExtendedRequest || m.ExtOID != wire.OIDWhoAmI {
				t.Errorf("parsed %+v", m)
			}
		}},
		{"root dse search", wire.RootDSESearch(9), func(t *testing.T, p *ber.Packet, m *wire.Message) {
			op := p.Children[1]
			f, err := ldap.DecompileFilter(op.Children[6])
			if err != nil || f != "(objectClass=*)" || op.Children[1].Value.(int64) != 0 || op.Children[7].Children[0].Value != "1.1" {
				t.Errorf("root dse search decoded as %v %q %v", op.Children, f, err)
			}
			if m.BaseObject != "" || !slices.Equal(m.FilterAttrs, []string{"objectclass"}) {
				t.Errorf("parsed %+v", m)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ber.DecodePacketErr(tc.raw)
			if err != nil {
				t.Fatalf("go-asn1-ber: %v", err)
			}
			m, err := wire.Parse(tc.raw)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tc.check(t, p, m)
		})
	}
}

func TestWithID(t *testing.T) {
	orig := msg(5, app(0, integer(3), octets("cn=a"), ctx(0, "pw")), ctxCons(0, ldap.NewControlPaging(1).Encode()))
	for _, id := range []int32{0, 1, 127, 128, 255, 256, 65536, 0x7fffffff} {
		got, err := wire.WithID(orig, id)
		if err != nil {
			t.Fatal(err)
		}
		m, err := wire.Parse(got)
		if err != nil || m.ID != id || m.BindName != "cn=a" || string(m.BindPassword) != "pw" {
			t.Fatalf("id %d: %+v %v", id, m, err)
		}
		// Everything after the id is byte-identical.
		if !bytes.HasSuffix(got, orig[5:]) {
			t.Errorf("id %d: op/controls re-encoded", id)
		}
	}
	if _, err := wire.WithID([]byte{0x30, 0x00}, 1); err == nil {
		t.Error("WithID accepted garbage")
	}
}

func TestNames(t *testing.T) {
	// Every code of RFC 4511 §4.1.9 and Appendix A, the IANA registry's
	// extensions, and the codes slapd sends beyond them; anything else is
	// a number, never a name made up.
	for code, want := range map[int]string{
		0: "success", 1: "operationsError", 2: "protocolError", 3: "timeLimitExceeded", 4: "sizeLimitExceeded",
		5: "compareFalse", 6: "compareTrue", 7: "authMethodNotSupported", 8: "strongerAuthRequired",
		10: "referral", 11: "adminLimitExceeded", 12: "unavailableCriticalExtension", 13: "confidentialityRequired",
		14: "saslBindInProgress", 16: "noSuchAttribute", 17: "undefinedAttributeType", 18: "inappropriateMatching",
		19: "constraintViolation", 20: "attributeOrValueExists", 21: "invalidAttributeSyntax", 32: "noSuchObject",
		33: "aliasProblem", 34: "invalidDNSyntax", 36: "aliasDereferencingProblem", 48: "inappropriateAuthentication",
		49: "invalidCredentials", 50: "insufficientAccessRights", 51: "busy", 52: "unavailable",
		53: "unwillingToPerform", 54: "loopDetect", 64: "namingViolation", 65: "objectClassViolation",
		66: "notAllowedOnNonLeaf", 67: "notAllowedOnRDN", 68: "entryAlreadyExists", 69: "objectClassModsProhibited",
		71: "affectsMultipleDSAs", 80: "other",
		76: "virtualListViewError", 113: "lcupResourcesExhausted", 117: "lcupReloadRequired", 118: "canceled",
		119: "noSuchOperation", 120: "tooLate", 121: "cannotCancel", 122: "assertionFailed",
		123: "authorizationDenied", 4096: "e-syncRefreshRequired", 16654: "noOperation",
		9: "code-9", 72: "code-72", 99: "code-99", -1: "code--1",
	} {
		if got := wire.ResultName(code); got != want {
			t.Errorf("ResultName(%d) = %q, want %q", code, got, want)
		}
	}
	requests := []struct {
		tag   byte
		name  string
		resp  byte
		final bool
	}{
		{wire.TagBindRequest, "bind", wire.TagBindResponse, true},
		{wire.TagUnbindRequest, "unbind", 0, true},
		{wire.TagSearchRequest, "search", wire.TagSearchResultDone, true},
		{wire.TagCompareRequest, "compare", wire.TagCompareResponse, true},
		{wire.TagAddRequest, "add", wire.TagAddResponse, true},
		{wire.TagModifyRequest, "modify", wire.TagModifyResponse, true},
		{wire.TagDelRequest, "delete", wire.TagDelResponse, true},
		{wire.TagModDNRequest, "modrdn", wire.TagModDNResponse, true},
		{wire.TagExtendedRequest, "extended", wire.TagExtendedResponse, true},
		{wire.TagAbandonRequest, "abandon", 0, true},
		{wire.TagSearchResultEntry, "", 0, false},
		{wire.TagSearchResultReference, "", 0, false},
		{wire.TagIntermediateResponse, "", 0, false},
	}
	for _, r := range requests {
		if got := wire.OpName(r.tag); got != r.name {
			t.Errorf("OpName(%#x) = %q, want %q", r.tag, got, r.name)
		}
		if got := wire.ResponseTag(r.tag); got != r.resp {
			t.Errorf("ResponseTag(%#x) = %#x, want %#x", r.tag, got, r.resp)
		}
		if r.resp != 0 && !wire.IsFinal(r.resp) {
			t.Errorf("IsFinal(%#x) = false", r.resp)
		}
		if !r.final && wire.IsFinal(r.tag) {
			t.Errorf("IsFinal(%#x) = true", r.tag)
		}
	}
	reads := map[*wire.Message]bool{
		{Op: wire.TagBindRequest}: true, {Op: wire.TagSearchRequest}: true, {Op: wire.TagCompareRequest}: true,
		{Op: wire.TagExtendedRequest, ExtOID: wire.OIDWhoAmI}:            true,
		{Op: wire.TagExtendedRequest, ExtOID: "1.3.6.1.4.1.4203.1.11.1"}: false, // password modify
		{Op: wire.TagAddRequest}:                                         false, {Op: wire.TagModifyRequest}: false, {Op: wire.TagDelRequest}: false, {Op: wire.TagModDNRequest}: false,
	}
	for m, want := range reads {
		if got := wire.IsRead(m); got != want {
			t.Errorf("IsRead(%s %s) = %v", wire.OpName(m.Op), m.ExtOID, got)
		}
	}
}

// ParseInto into one reused Message gives what Parse gives, whatever the
// Message held before: nothing of an earlier PDU is left in it.
func TestParseIntoReused(t *testing.T) {
	pdus := [][]byte{
		wire.BindRequest(1, "uid=alice,ou=people,dc=example,dc=org", []byte("pw")),
		wire.ExtendedResult(2, wire.ResultProtocolError, "no", "1.3.6.1.4.1.1466.20037"),
		wire.RootDSESearch(3),
		wire.Result(4, wire.TagSearchResultDone, wire.ResultSuccess, "dc=example,dc=org", "done"),
		wire.Result(5, wire.TagBindResponse, 49, "", ""),
	}
	var m wire.Message
	for round := range 2 {
		for i, raw := range pdus {
			want, err := wire.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if err := wire.ParseInto(&m, raw); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&m, want) {
				t.Errorf("round %d, PDU %d: ParseInto gave %+v, Parse %+v", round, i, m, *want)
			}
		}
	}
	if err := wire.ParseInto(&m, []byte{0x30, 0x05, 0x02}); err == nil {
		t.Error("a truncated PDU parsed")
	}
}
