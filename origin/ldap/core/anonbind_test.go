package core_test

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	ber "github.com/go-asn1-ber/asn1-ber"
)

// An anonymous simple bind (empty name and password) succeeds on slapd
// but grants nothing: the pre-bind caps stay. A 300 KiB PDU after it gets
// the core's Notice of Disconnection instead of reaching slapd, and 1,000
// pipelined searches get busy beyond max_pending (100) — before the fix
// the PDU was forwarded and the searches were all sent, until slapd
// closed the connection. An unauthenticated bind (a name, no password)
// is no different.
func TestAnonymousBindKeepsPreBindCaps(t *testing.T) {
	sl, h := twoServers(t, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(300)}, nil)
	binds := map[string][]byte{
		"anonymous":       wire.BindRequest(1, "", nil),
		"unauthenticated": wire.BindRequest(1, alice, nil),
	}
	for name, bind := range binds {
		t.Run(name+" PDU cap", func(t *testing.T) {
			c, r := rawConn(t, h)
			c.Write(bind)
			m := next(t, r)
			if m.Op != wire.TagBindResponse {
				t.Fatalf("bind answered %+v", m)
			}
			preBindCapCuts(t, c, r, 2)
		})
	}
	t.Run("pending cap", func(t *testing.T) {
		c, r := rawConn(t, h)
		var buf bytes.Buffer
		buf.Write(wire.BindRequest(1, "", nil))
		c.Write(buf.Bytes())
		if m := next(t, r); m.Op != wire.TagBindResponse || m.ResultCode != wire.ResultSuccess {
			t.Fatalf("anonymous bind answered %+v", m)
		}
		buf.Reset()
		const n = 1000
		for i := 2; i < 2+n; i++ {
			buf.Write(searchPDU(int32(i), "ou=bulk,"+testbed.Suffix))
		}
		go c.Write(buf.Bytes())
		codes := map[int]int{}
		for done := 0; done < n; {
			m := next(t, r)
			if m.ID == 0 {
				t.Fatalf("notice of disconnection after %d results (%v): %+v", done, codes, m)
			}
			if m.Op == wire.TagSearchResultDone {
				codes[m.ResultCode]++
				done++
			}
		}
		if codes[wire.ResultBusy] == 0 || codes[wire.ResultSuccess]+codes[wire.ResultBusy] != n {
			t.Errorf("results %v: want success and busy (max_pending %d)", codes, core.DefaultConfig().MaxPending)
		}
	})
	bothUp(t, h, sl)
}

// next reads and parses one PDU.
func next(t *testing.T, r *wire.Reader) *wire.Message {
	t.Helper()
	raw, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	m, err := wire.Parse(bytes.Clone(raw))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// searchFilterPDU is a base search of the root DSE for (cn=value).
func searchFilterPDU(id int32, value string) []byte {
	p := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "LDAPMessage")
	p.AppendChild(ber.NewInteger(ber.ClassUniversal, ber.TypePrimitive, ber.TagInteger, int64(id), "id"))
	req := ber.Encode(ber.ClassApplication, ber.TypeConstructed, wire.TagSearchRequest&0x1f, nil, "search")
	req.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, "", "base"))
	for _, v := range []int64{0, 0} {
		req.AppendChild(ber.NewInteger(ber.ClassUniversal, ber.TypePrimitive, ber.TagEnumerated, v, "scope, deref"))
	}
	for _, v := range []int64{0, 0} {
		req.AppendChild(ber.NewInteger(ber.ClassUniversal, ber.TypePrimitive, ber.TagInteger, v, "limits"))
	}
	req.AppendChild(ber.NewBoolean(ber.ClassUniversal, ber.TypePrimitive, ber.TagBoolean, false, "typesOnly"))
	f := ber.Encode(ber.ClassContext, ber.TypeConstructed, 3, nil, "equality")
	f.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, "cn", "attr"))
	f.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, value, "value"))
	req.AppendChild(f)
	req.AppendChild(ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "attributes"))
	p.AppendChild(req)
	return p.Bytes()
}

// A simple bind with an empty name and a password is anonymous too: slapd
// refuses it by default (invalidCredentials), and with "allow
// bind_anon_cred" accepts it as an anonymous bind, ignoring the password.
// Either way the connection is anonymous and the pre-bind caps stay: a
// 300 KiB PDU after it gets the core's Notice of Disconnection.
func TestAnonymousBindWithPasswordKeepsPreBindCaps(t *testing.T) {
	sl, h := twoServers(t, testbed.SlapdConfig{Allow: []string{"bind_anon_cred"}}, nil)
	c, r := rawConn(t, h)
	c.Write(wire.BindRequest(1, "", []byte("anything")))
	if m := next(t, r); m.Op != wire.TagBindResponse || m.ResultCode != wire.ResultSuccess {
		t.Fatalf("bind answered %+v, want slapd's success", m)
	}
	preBindCapCuts(t, c, r, 2)
	bothUp(t, h, sl)
}

// preBindCapCuts sends, as message id, a search whose filter is a 300 KiB
// value, over the 256 KiB cap of a client not bound, and wants
// the core's Notice of Disconnection naming the size cap.
func preBindCapCuts(t *testing.T, c net.Conn, r *wire.Reader, id int32) {
	t.Helper()
	go c.Write(searchFilterPDU(id, strings.Repeat("x", 300<<10)))
	n := expectNotice(t, r, wire.ResultProtocolError)
	if !strings.Contains(n.Diagnostic, "exceeds") {
		t.Errorf("notice %q, want the size cap", n.Diagnostic)
	}
}

// saslExternalPDU is a SASL EXTERNAL bind request without credentials.
func saslExternalPDU(id int32) []byte {
	p := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "LDAPMessage")
	p.AppendChild(ber.NewInteger(ber.ClassUniversal, ber.TypePrimitive, ber.TagInteger, int64(id), "id"))
	req := ber.Encode(ber.ClassApplication, ber.TypeConstructed, wire.TagBindRequest&0x1f, nil, "bind")
	req.AppendChild(ber.NewInteger(ber.ClassUniversal, ber.TypePrimitive, ber.TagInteger, int64(3), "version"))
	req.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, "", "name"))
	sasl := ber.Encode(ber.ClassContext, ber.TypeConstructed, 3, nil, "sasl")
	sasl.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, "EXTERNAL", "mechanism"))
	req.AppendChild(sasl)
	p.AppendChild(req)
	return p.Bytes()
}

// After a successful bind a 300 KiB PDU is a bound client's and reaches
// slapd; a bind that then fails — refused by slapd (a wrong password) or
// by the core itself (SASL EXTERNAL) — or is anonymous leaves the
// connection anonymous with the pre-bind caps again: the same PDU gets
// the core's Notice of Disconnection. (Before the fix the PDU after
// slapd's answer was still read with the bound cap, awaited before the
// cap shrank, and forwarded.)
func TestFailedBindRestoresPreBindCaps(t *testing.T) {
	sl, h := twoServers(t, testbed.SlapdConfig{}, nil)
	for name, bind := range map[string][]byte{
		"wrong password": wire.BindRequest(3, alice, []byte("wrong")),
		"SASL EXTERNAL":  saslExternalPDU(3),
		"anonymous":      wire.BindRequest(3, "", nil),
	} {
		t.Run(name, func(t *testing.T) {
			c, r := h.rawBind(t, 1)
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard
			go c.Write(searchFilterPDU(2, strings.Repeat("x", 300<<10)))
			if m := next(t, r); m.ID != 2 || m.Op != wire.TagSearchResultDone {
				t.Fatalf("the big search as alice: %+v", m)
			}
			c.Write(bind)
			if m := next(t, r); m.ID != 3 || m.Op != wire.TagBindResponse || (m.ResultCode == wire.ResultSuccess) != (name == "anonymous") {
				t.Fatalf("the second bind: %+v", m)
			}
			preBindCapCuts(t, c, r, 4)
		})
	}
	bothUp(t, h, sl)
}
