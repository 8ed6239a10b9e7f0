package wire_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/edgefleet/edgefleet/ldap/wire"
)

// FuzzReader: any byte stream frames into PDUs that are exact, in-order
// slices of the input within the cap, then ends in a clean error.
func FuzzReader(f *testing.F) {
	f.Add(append(wire.BindRequest(1, "cn=a", []byte("pw")), wire.UnbindRequest(2)...))
	f.Add(unbindNonMinimal)
	f.Add([]byte{0x30, 0x80, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 4096
		r := wire.NewReader(bytes.NewReader(data))
		r.SetMax(max)
		off := 0
		for {
			pdu, err := r.Next()
			if err != nil {
				var pe *wire.ProtocolError
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &pe) {
					t.Fatalf("unexpected error type %T: %v", err, err)
				}
				if errors.Is(err, io.EOF) && off != len(data) {
					t.Fatalf("EOF at %d of %d", off, len(data))
				}
				return
			}
			if len(pdu) > max || pdu[0] != 0x30 || !bytes.Equal(pdu, data[off:off+len(pdu)]) {
				t.Fatalf("pdu at %d is not the input's bytes", off)
			}
			off += len(pdu)
			_, _ = wire.Parse(pdu)
		}
	})
}

// FuzzParse is the one fuzz target of the package's BER readers: Parse,
// Peek and the paged-results control never panic; what Parse accepts
// keeps Raw, Peek reads the same id and operation, WithID changes only the
// id, a restarted paged request carries exactly the new page size and an
// empty cookie, and one for the next page its size and cookie and the
// other controls (HasControl) as they were.
func FuzzParse(f *testing.F) {
	f.Add(wire.BindRequest(1, "cn=a", []byte("pw")))
	f.Add(wire.RootDSESearch(2))
	f.Add(wire.NoticeOfDisconnection(2, "x"))
	f.Add(pagedSearch(500, "c", false))
	f.Add(pagedSearch(0, "", true))
	f.Add([]byte{0x30, 0x84, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		id, op, peeked := wire.Peek(data)
		wire.FindPaged(data)
		restarted, rerr := wire.RestartPaged(data, 77)
		if rerr == nil {
			if p, ok := wire.FindPaged(restarted); ok && (p.Size != 77 || p.Cookie != "") {
				t.Fatalf("restarted request has %+v", p)
			}
		}
		if next, err := wire.WithPaged(data, wire.Paged{Size: 5, Cookie: "next"}); err == nil {
			if p, ok := wire.FindPaged(next); ok && (p.Size != 5 || p.Cookie != "next") {
				t.Fatalf("next page request has %+v", p)
			}
			if wire.HasControl(next, wire.OIDSyncRequest) != wire.HasControl(data, wire.OIDSyncRequest) {
				t.Fatal("WithPaged changed the sync request control")
			}
		}
		m, err := wire.Parse(data)
		if err != nil {
			var pe *wire.ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ProtocolError: %v", err, err)
			}
			return
		}
		if !bytes.Equal(m.Raw, data) {
			t.Fatal("Raw differs from the input")
		}
		if !peeked || id != m.ID || op != m.Op {
			t.Fatalf("Peek = %d %#x %v, Parse read %d %#x", id, op, peeked, m.ID, m.Op)
		}
		if rerr == nil {
			if _, err := wire.Parse(restarted); err != nil {
				t.Fatalf("restarted request does not parse: %v", err)
			}
		}
		re, err := wire.WithID(data, 77)
		if err != nil {
			t.Fatalf("WithID of a parsed PDU: %v", err)
		}
		m2, err := wire.Parse(re)
		if err != nil {
			t.Fatalf("re-parse after WithID: %v", err)
		}
		if m2.ID != 77 || m2.Op != m.Op || m2.BindName != m.BindName || m2.BaseObject != m.BaseObject ||
			m2.ResultCode != m.ResultCode || m2.ExtOID != m.ExtOID || m2.EntryDN != m.EntryDN {
			t.Fatalf("WithID changed more than the id: %+v vs %+v", m2, m)
		}
	})
}
