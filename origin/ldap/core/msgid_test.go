package core_test

import (
	"bytes"
	"strings"
	"testing"

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
	bothUp(t, h, sl)
}
