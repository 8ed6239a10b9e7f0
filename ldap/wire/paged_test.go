package wire_test

import (
	"bytes"
	"testing"

	ber "github.com/go-asn1-ber/asn1-ber"

	"github.com/edgefleet/edgefleet/ldap/wire"
)

// pagedSearch is a search request (id 5) with another control and then a
// paged-results control of that size and cookie.
func pagedSearch(size int64, cookie string, critical bool) []byte {
	op := app(ber.Tag(3), octets("dc=example,dc=com"), enum(2), enum(0), integer(0), integer(0),
		ber.NewBoolean(ber.ClassUniversal, ber.TypePrimitive, ber.TagBoolean, false, ""),
		ctx(7, "objectClass"), seq())
	paged := seq(octets(wire.OIDPagedResults))
	if critical {
		paged.AppendChild(ber.NewBoolean(ber.ClassUniversal, ber.TypePrimitive, ber.TagBoolean, true, ""))
	}
	paged.AppendChild(octets(string(seq(integer(size), octets(cookie)).Bytes())))
	return msg(5, op, ctxCons(0, seq(octets("1.3.6.1.4.1.4203.1.10.1")), paged))
}

func TestRestartPaged(t *testing.T) {
	for _, tc := range []struct {
		name     string
		critical bool
	}{{"not critical", false}, {"critical", true}} {
		t.Run(tc.name, func(t *testing.T) {
			raw := pagedSearch(500, "cookie-from-L1", tc.critical)
			p, ok := wire.FindPaged(raw)
			if !ok || p.Size != 500 || p.Cookie != "cookie-from-L1" {
				t.Fatalf("FindPaged = %+v %v", p, ok)
			}
			got, err := wire.RestartPaged(raw, 1500)
			if err != nil {
				t.Fatal(err)
			}
			if want := pagedSearch(1500, "", tc.critical); !bytes.Equal(got, want) {
				t.Fatalf("RestartPaged:\n got %x\nwant %x", got, want)
			}
		})
	}
}

func TestFindPagedAbsent(t *testing.T) {
	for name, raw := range map[string][]byte{
		"no controls":   search(t, 2, "", "(cn=x)"),
		"other control": msg(2, app(ber.Tag(3)), ctxCons(0, seq(octets("1.3.6.1.4.1.4203.1.10.1")))),
		"no value":      msg(2, app(ber.Tag(3)), ctxCons(0, seq(octets(wire.OIDPagedResults)))),
		"bad value":     msg(2, app(ber.Tag(3)), ctxCons(0, seq(octets(wire.OIDPagedResults), octets("x")))),
		"negative size": msg(2, app(ber.Tag(3)), ctxCons(0, seq(octets(wire.OIDPagedResults), octets(string(seq(integer(-1), octets("")).Bytes()))))),
	} {
		if p, ok := wire.FindPaged(raw); ok {
			t.Errorf("%s: FindPaged = %+v, want none", name, p)
		}
	}
	if _, err := wire.RestartPaged(search(t, 2, "", "(cn=x)"), 10); err == nil {
		t.Error("RestartPaged of a request without controls: no error")
	}
}

// TestPeek: the id and operation of what Parse accepts, read without the
// parse; nothing where Parse fails on them.
func TestPeek(t *testing.T) {
	for _, raw := range [][]byte{
		search(t, 7, "dc=example,dc=com", "(cn=x)"),
		wire.Result(1<<31-1, wire.TagSearchResultDone, wire.ResultSuccess, "", ""),
		wire.UnbindRequest(3),
		msg(4, result(ber.Tag(1), 0, "", ""), ctxCons(0)),
		{0x30, 0x06, 0x02, 0x02, 0x00, 0x09, 0x42, 0x00}, // non-minimal id
	} {
		m, err := wire.Parse(raw)
		if err != nil {
			t.Fatalf("Parse(%x): %v", raw, err)
		}
		if id, op, ok := wire.Peek(raw); !ok || id != m.ID || op != m.Op {
			t.Errorf("Peek(%x) = %d %#x %v, want %d %#x", raw, id, op, ok, m.ID, m.Op)
		}
	}
	for name, raw := range map[string][]byte{
		"empty":               {},
		"not a sequence":      {0x31, 0x03, 0x02, 0x01, 0x01},
		"no operation":        {0x30, 0x03, 0x02, 0x01, 0x01},
		"negative id":         {0x30, 0x05, 0x02, 0x01, 0xff, 0x42, 0x00},
		"id beyond 31 bits":   {0x30, 0x09, 0x02, 0x05, 0x00, 0x80, 0x00, 0x00, 0x00, 0x42, 0x00},
		"universal op tag":    {0x30, 0x05, 0x02, 0x01, 0x01, 0x04, 0x00},
		"length past the end": {0x30, 0x08, 0x02, 0x01, 0x01, 0x42, 0x00},
		"trailing bytes":      {0x30, 0x05, 0x02, 0x01, 0x01, 0x42, 0x00, 0x00},
	} {
		if id, op, ok := wire.Peek(raw); ok {
			t.Errorf("%s: Peek = %d %#x, want not ok", name, id, op)
		}
	}
}

func TestWithPaged(t *testing.T) {
	raw := pagedSearch(500, "cookie-from-L1", true)
	got, err := wire.WithPaged(raw, wire.Paged{Size: 300, Cookie: "cookie-from-L2"})
	if err != nil {
		t.Fatal(err)
	}
	if want := pagedSearch(300, "cookie-from-L2", true); !bytes.Equal(got, want) {
		t.Fatalf("WithPaged:\n got %x\nwant %x", got, want)
	}
}
