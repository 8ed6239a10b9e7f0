package core_test

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
)

// 2,000 pipelined searches that all use message id 7 (RFC 4511 §4.1.1.1:
// an id must differ from every request in progress): the client gets a
// Notice of Disconnection (protocolError) naming the id, not a few
// answers and silence; no server is blamed and L2 is never tried (before
// the fix the duplicates escaped max_pending, slapd closed the connection
// and all but one search went unanswered). Reusing an id once its
// operation is over is fine.
func TestMessageIDReuse(t *testing.T) {
	sl, h := twoServers(t, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(300)}, nil)
	t.Run("in progress", func(t *testing.T) {
		c, r := rawConn(t, h)
		var buf bytes.Buffer
		for range 2000 {
			buf.Write(searchPDU(7, "ou=bulk,"+testbed.Suffix))
		}
		go c.Write(buf.Bytes())
		n := expectNotice(t, r, wire.ResultProtocolError)
		if !strings.Contains(n.Diagnostic, "message id 7 is in use") {
			t.Errorf("notice %q, want the reused id named", n.Diagnostic)
		}
	})
	t.Run("after its answer", func(t *testing.T) {
		c, r := rawConn(t, h)
		for i := range 3 {
			c.Write(searchPDU(7, alice))
			for {
				m := next(t, r)
				if m.Op == wire.TagSearchResultDone {
					if m.ID != 7 || m.ResultCode != wire.ResultSuccess {
						t.Fatalf("search %d: %+v", i, m)
					}
					break
				}
			}
		}
	})
	t.Run("after its abandon", func(t *testing.T) {
		c, r := rawConn(t, h)
		var buf bytes.Buffer
		buf.Write(searchPDU(7, "ou=bulk,"+testbed.Suffix))
		buf.Write([]byte{0x30, 0x06, 0x02, 0x01, 0x08, 0x50, 0x01, 0x07}) // abandon 7
		buf.Write(searchPDU(7, alice))
		c.Write(buf.Bytes())
		for {
			m := next(t, r)
			if m.ID != 7 {
				t.Fatalf("answer %+v, want only message id 7's", m)
			}
			if m.Op == wire.TagSearchResultDone {
				if m.ResultCode != wire.ResultSuccess {
					t.Fatalf("the search reusing an abandoned id: %+v", m)
				}
				break
			}
		}
		if got := h.targets("abandon"); len(got) != 1 {
			t.Errorf("abandons logged %v, want one", got)
		}
	})
	bothUp(t, h, sl)
}

// A client may use message id 2147483647, the core's own on a fresh
// connection (its root DSE search, a re-bind): a bound session's search
// with that id is answered on L1, and after L1 dies it is answered on L2
// once the core has re-bound there with the same id; an anonymous
// session's first search with it, on a fresh connection, gets its own
// entries and not the root DSE.
func TestMessageIDOfTheCoreAcrossFailover(t *testing.T) {
	sl, h := twoServers(t, testbed.SlapdConfig{}, nil)
	const id = 1<<31 - 1
	search := func(c net.Conn, r *wire.Reader, base string) (entries int) {
		t.Helper()
		c.Write(searchPDU(id, base))
		for {
			m := next(t, r)
			if m.ID != id {
				t.Fatalf("answer %+v, want message id %d", m, id)
			}
			switch m.Op {
			case wire.TagSearchResultEntry:
				entries++
			case wire.TagSearchResultDone:
				if m.ResultCode != wire.ResultSuccess {
					t.Fatalf("search: %+v", m)
				}
				return entries
			}
		}
	}
	anon, ar := rawConn(t, h)
	if n := search(anon, ar, "ou=people,"+testbed.Suffix); n != 4 {
		t.Errorf("anonymous search: %d entries, want ou=people and its 3 users", n)
	}
	c, r := h.rawBind(t, 1)
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard
	if n := search(c, r, alice); n != 1 {
		t.Errorf("on L1: %d entries", n)
	}
	sl[0].Kill()
	if n := search(c, r, alice); n != 1 {
		t.Errorf("after L1 died: %d entries", n)
	}
	if got := h.targets("search"); strings.Join(got, ",") != "L1,L1,L2" {
		t.Errorf("searches went to %v, want L1, L1, L2", got)
	}
}
