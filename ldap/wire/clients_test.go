package wire_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	ber "github.com/go-asn1-ber/asn1-ber"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
)

var updateCorpus = flag.Bool("update-corpus", false, "write the PDUs captured from ldap-utils into testdata/fuzz")

// recorder is a minimal LDAP server: it frames what a real client sends
// with Reader, parses it with Parse, and answers with the builders, so a
// run of ldapsearch & co. proves framing, parsing and the built responses
// against the real peer.
type recorder struct {
	t    *testing.T
	ln   net.Listener
	mu   sync.Mutex
	msgs []*wire.Message
	errs []error
}

func newRecorder(t *testing.T) *recorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{t: t, ln: ln}
	testbed.ServeConns(t, ln, r.handle)
	return r
}

func (r *recorder) url() string { return "ldap://" + r.ln.Addr().String() }

func (r *recorder) handle(c net.Conn) {
	rd := wire.NewReader(c)
	rd.SetMax(256 << 10)
	for {
		raw, err := rd.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.record(nil, err)
			}
			return
		}
		m, err := wire.Parse(bytes.Clone(raw))
		r.record(m, err)
		if err != nil {
			c.Write(wire.NoticeOfDisconnection(wire.ResultProtocolError, err.Error()))
			return
		}
		var resp []byte
		switch m.Op {
		case wire.TagBindRequest:
			resp = wire.Result(m.ID, wire.TagBindResponse, wire.ResultSuccess, "", "")
			if m.SASLMech == "CRAM-MD5" && m.SASLCreds == nil {
				resp = saslChallenge(m.ID, "<1896.697170952@postoffice.example.net>")
			}
		case wire.TagUnbindRequest:
			return
		case wire.TagAbandonRequest:
		case wire.TagCompareRequest:
			resp = wire.Result(m.ID, wire.TagCompareResponse, 6, "", "") // compareTrue
		case wire.TagExtendedRequest:
			switch m.ExtOID {
			case wire.OIDStartTLS:
				resp = wire.ExtendedResult(m.ID, wire.ResultUnwillingToPerform, "no tls here", wire.OIDStartTLS)
			case wire.OIDWhoAmI:
				resp = wire.ExtendedResult(m.ID, wire.ResultSuccess, "", "")
			default:
				resp = wire.ExtendedResult(m.ID, wire.ResultUnwillingToPerform, "unknown", "")
			}
		default:
			resp = wire.Result(m.ID, wire.ResponseTag(m.Op), wire.ResultSuccess, "", "")
		}
		if resp != nil {
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	}
}

// saslChallenge is a BindResponse saslBindInProgress with serverSaslCreds,
// built with go-asn1-ber because the core never makes one (it forwards the
// server's).
func saslChallenge(id int32, challenge string) []byte {
	msg := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "LDAPMessage")
	msg.AppendChild(ber.NewInteger(ber.ClassUniversal, ber.TypePrimitive, ber.TagInteger, int64(id), "id"))
	op := ber.Encode(ber.ClassApplication, ber.TypeConstructed, 1, nil, "BindResponse")
	op.AppendChild(ber.NewInteger(ber.ClassUniversal, ber.TypePrimitive, ber.TagEnumerated, int64(wire.ResultSaslBindInProgress), "code"))
	op.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, "", "matched"))
	op.AppendChild(ber.NewString(ber.ClassUniversal, ber.TypePrimitive, ber.TagOctetString, "", "diag"))
	op.AppendChild(ber.NewString(ber.ClassContext, ber.TypePrimitive, 7, challenge, "serverSaslCreds"))
	msg.AppendChild(op)
	return msg.Bytes()
}

func (r *recorder) record(m *wire.Message, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err)
		return
	}
	r.msgs = append(r.msgs, m)
}

func (r *recorder) take() ([]*wire.Message, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, e := r.msgs, r.errs
	r.msgs, r.errs = nil, nil
	return m, e
}

func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LDAPNOINIT=1") // ignore ldap.conf and ~/.ldaprc
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func ops(ms []*wire.Message) []string {
	var s []string
	for _, m := range ms {
		s = append(s, wire.OpName(m.Op))
	}
	return s
}

// TestRealClients runs ldap-utils against the recorder and checks what
// was parsed from each real client's bytes.
func TestRealClients(t *testing.T) {
	testbed.Need(t, "ldapsearch", "ldapwhoami", "ldapadd", "ldapmodify", "ldapdelete", "ldapmodrdn", "ldapcompare")
	rec := newRecorder(t)
	dir := t.TempDir()
	ldif := filepath.Join(dir, "changes.ldif")
	err := os.WriteFile(ldif, []byte(`dn: cn=Jürgen,ou=People,o=pqr
changetype: add
objectClass: person
cn: Jürgen
sn: X

dn: cn=Jürgen,ou=People,o=pqr
changetype: modify
replace: sn
sn: Y

dn: cn=Jürgen,ou=People,o=pqr
changetype: modrdn
newrdn: cn=Juergen
deleteoldrdn: 1

dn: cn=Juergen,ou=People,o=pqr
changetype: delete
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	bind := []string{"-x", "-H", rec.url(), "-D", "CN=Admin, O=PQR", "-w", "s3cret"}

	tests := []struct {
		name  string
		cmd   string
		args  []string
		ops   []string
		check func(t *testing.T, ms []*wire.Message, out string)
	}{
		{
			name: "ldapsearch-filter", cmd: "ldapsearch",
			args: append(slices.Clone(bind), "-LLL", "-b", "ou=People,o=pqr",
				"(&(objectClass=person)(|(cn=J*)(!(uid=x))(mail>=a)(CN~=jon)(sn:caseExactMatch:=Y)(:dn:2.5.13.5:=z)))", "cn", "mail"),
			ops: []string{"bind", "search", "unbind"},
			check: func(t *testing.T, ms []*wire.Message, out string) {
				b := ms[0]
				if b.BindName != "CN=Admin, O=PQR" || !b.BindSimple || string(b.BindPassword) != "s3cret" {
					t.Errorf("bind = %q simple=%v pw=%q", b.BindName, b.BindSimple, b.BindPassword)
				}
				s := ms[1]
				if s.BaseObject != "ou=People,o=pqr" {
					t.Errorf("base = %q", s.BaseObject)
				}
				want := []string{"objectclass", "cn", "uid", "mail", "sn", ""} // "": the extensible match without a type
				if !slices.Equal(s.FilterAttrs, want) {
					t.Errorf("filter attrs = %q, want %q", s.FilterAttrs, want)
				}
				if s.ID <= b.ID || ms[2].ID <= s.ID {
					t.Errorf("ids %d %d %d not increasing", b.ID, s.ID, ms[2].ID)
				}
			},
		},
		{
			name: "ldapsearch-anonymous-paged-rootdse", cmd: "ldapsearch",
			args: []string{"-x", "-H", rec.url(), "-E", "pr=5/noprompt", "-b", "", "-s", "base", "(objectClass=*)", "+"},
			ops:  []string{"bind", "search", "unbind"},
			check: func(t *testing.T, ms []*wire.Message, out string) {
				if ms[0].BindName != "" || !ms[0].BindSimple || len(ms[0].BindPassword) != 0 {
					t.Errorf("anonymous bind parsed as %q %v %q", ms[0].BindName, ms[0].BindSimple, ms[0].BindPassword)
				}
				if !bytes.Contains(ms[1].Raw, []byte("1.2.840.113556.1.4.319")) {
					t.Errorf("paged results control missing from the search")
				}
				if ms[1].BaseObject != "" || !slices.Equal(ms[1].FilterAttrs, []string{"objectclass"}) {
					t.Errorf("search = %q %q", ms[1].BaseObject, ms[1].FilterAttrs)
				}
			},
		},
		{
			name: "ldapsearch-starttls-refused", cmd: "ldapsearch",
			args: append(slices.Clone(bind), "-Z", "-b", "o=pqr", "(uid=a)"),
			ops:  []string{"extended", "bind", "search", "unbind"},
			check: func(t *testing.T, ms []*wire.Message, out string) {
				if ms[0].ExtOID != wire.OIDStartTLS {
					t.Errorf("ext oid = %q", ms[0].ExtOID)
				}
				if !bytes.Contains([]byte(out), []byte("no tls here")) {
					t.Errorf("client did not show our diagnostic:\n%s", out)
				}
			},
		},
		{
			name: "ldapwhoami", cmd: "ldapwhoami", args: bind,
			ops: []string{"bind", "extended", "unbind"},
			check: func(t *testing.T, ms []*wire.Message, out string) {
				if ms[1].ExtOID != wire.OIDWhoAmI || !wire.IsRead(ms[1]) {
					t.Errorf("whoami oid = %q read=%v", ms[1].ExtOID, wire.IsRead(ms[1]))
				}
			},
		},
		{
			name: "ldapwhoami-sasl-plain", cmd: "ldapwhoami",
			args: []string{"-H", rec.url(), "-O", "none", "-Y", "PLAIN", "-U", "agent1", "-w", "pw1", "-N"},
			ops:  []string{"bind", "extended", "unbind"},
			check: func(t *testing.T, ms []*wire.Message, out string) {
				b := ms[0]
				if b.BindSimple || b.SASLMech != "PLAIN" || string(b.SASLCreds) != "\x00agent1\x00pw1" {
					t.Errorf("sasl bind = simple %v mech %q creds %q", b.BindSimple, b.SASLMech, b.SASLCreds)
				}
			},
		},
		{
			name: "ldapwhoami-sasl-cram-md5-two-steps", cmd: "ldapwhoami",
			args: []string{"-H", rec.url(), "-Y", "CRAM-MD5", "-U", "agent1", "-w", "pw1", "-N"},
			ops:  []string{"bind", "bind", "extended", "unbind"},
			check: func(t *testing.T, ms []*wire.Message, out string) {
				if ms[0].SASLMech != "CRAM-MD5" || ms[0].SASLCreds != nil {
					t.Errorf("step 1 = %q %q", ms[0].SASLMech, ms[0].SASLCreds)
				}
				if ms[1].SASLMech != "CRAM-MD5" || !bytes.HasPrefix(ms[1].SASLCreds, []byte("agent1 ")) {
					t.Errorf("step 2 = %q %q", ms[1].SASLMech, ms[1].SASLCreds)
				}
			},
		},
		{
			name: "ldapmodify-add-modify-modrdn-delete", cmd: "ldapmodify", args: append(slices.Clone(bind), "-f", ldif),
			ops: []string{"bind", "add", "modify", "modrdn", "delete", "unbind"},
			check: func(t *testing.T, ms []*wire.Message, out string) {
				want := []string{"cn=Jürgen,ou=People,o=pqr", "cn=Jürgen,ou=People,o=pqr", "cn=Jürgen,ou=People,o=pqr", "cn=Juergen,ou=People,o=pqr"}
				for i, w := range want {
					if ms[i+1].EntryDN != w || wire.IsRead(ms[i+1]) {
						t.Errorf("%s dn = %q read=%v, want %q", wire.OpName(ms[i+1].Op), ms[i+1].EntryDN, wire.IsRead(ms[i+1]), w)
					}
				}
			},
		},
		{
			name: "ldapadd", cmd: "ldapadd", args: append(slices.Clone(bind), "-c", "-f", ldif),
			ops: []string{"bind", "add", "modify", "modrdn", "delete", "unbind"},
		},
		{
			name: "ldapdelete", cmd: "ldapdelete", args: append(slices.Clone(bind), "uid=gone,o=pqr"),
			ops: []string{"bind", "delete", "unbind"},
			check: func(t *testing.T, ms []*wire.Message, out string) {
				if ms[1].EntryDN != "uid=gone,o=pqr" {
					t.Errorf("delete dn = %q", ms[1].EntryDN)
				}
			},
		},
		{
			name: "ldapcompare", cmd: "ldapcompare", args: append(slices.Clone(bind), "uid=a,o=pqr", "sn:Y"),
			ops: []string{"bind", "compare", "unbind"},
			check: func(t *testing.T, ms []*wire.Message, out string) {
				if ms[1].CompareDN != "uid=a,o=pqr" || !wire.IsRead(ms[1]) {
					t.Errorf("compare dn = %q", ms[1].CompareDN)
				}
				if !bytes.Contains([]byte(out), []byte("TRUE")) {
					t.Errorf("ldapcompare did not read compareTrue:\n%s", out)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, tc.cmd, tc.args...)
			var ee *exec.ExitError
			// ldapcompare exits 6 (compareTrue); everything else must succeed.
			if err != nil && !(tc.cmd == "ldapcompare" && errors.As(err, &ee) && ee.ExitCode() == 6) {
				t.Fatalf("%s: %v\n%s", tc.cmd, err, out)
			}
			// The client may close before the recorder has parsed its unbind.
			var ms []*wire.Message
			var errs []error
			deadline := time.Now().Add(5 * time.Second)
			for {
				m, e := rec.take()
				ms, errs = append(ms, m...), append(errs, e...)
				if len(ms) >= len(tc.ops) || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if len(errs) > 0 {
				t.Fatalf("recorder errors: %v", errs)
			}
			if got := ops(ms); !slices.Equal(got, tc.ops) {
				t.Fatalf("ops = %q, want %q\n%s", got, tc.ops, out)
			}
			if tc.check != nil {
				tc.check(t, ms, out)
			}
			if *updateCorpus {
				for i, m := range ms {
					writeCorpus(t, "FuzzParse", fmt.Sprintf("%s-%d", tc.name, i), m.Raw)
				}
				var all []byte
				for _, m := range ms {
					all = append(all, m.Raw...)
				}
				writeCorpus(t, "FuzzReader", tc.name, all)
			}
		})
	}
}

// writeCorpus stores data as a go-fuzz corpus file ([]byte argument).
func writeCorpus(t *testing.T, target, name string, data []byte) {
	dir := filepath.Join("testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
	if err := os.WriteFile(filepath.Join(dir, "client-"+name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
