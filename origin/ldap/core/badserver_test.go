package core_test

import (
	"net"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/go-ldap/ldap/v3"
)

// badServer listens on loopback and answers the first PDU of each
// connection with answer(messageID), then keeps the connection open
// until the core closes it, or closes it at once with hangUp. It is the misbehaving directory server whose
// bytes are the subject of the test; slapd cannot be made to send them.
func badServer(t *testing.T, answer func(id int32) []byte, hangUp bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testbed.ServeConns(t, ln, func(c net.Conn) {
		r := wire.NewReader(c)
		m, ok := readMessage(r)
		if !ok {
			return
		}
		c.Write(answer(m.ID))
		for !hangUp {
			if _, err := r.Next(); err != nil {
				return
			}
		}
	})
	return ln.Addr().String()
}

// readMessage reads and parses the next PDU; false at the end of the
// stream or on a malformed PDU.
func readMessage(r *wire.Reader) (*wire.Message, bool) {
	raw, err := r.Next()
	if err != nil {
		return nil, false
	}
	m, err := wire.Parse(raw)
	return m, err == nil
}

// A server that answers with bytes that are not LDAP is a failed server:
// OFFLINE for everyone, and the bind fails over to the next one. A PDU over
// MaxBackendPDU fails the operation (adminLimitExceeded) without a replay
// and without marking the server OFFLINE. Nothing panics or allocates the
// declared length.
func TestBadServerPDUs(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	for _, tc := range []struct {
		name    string
		answer  func(id int32) []byte
		code    uint16 // the bind's result: 0 when it fails over and succeeds on L1
		offline bool
		hangUp  bool // the server closes after its answer
	}{
		{"garbage", func(int32) []byte { return []byte("HTTP/1.1 400 Bad Request\r\n\r\n") }, 0, true, false},
		{"indefinite length", func(int32) []byte { return []byte{0x30, 0x80, 0x02, 0x01, 0x01, 0x61, 0x00, 0x00, 0x00} }, 0, true, false},
		// A PDU cut short by the server's close (one cut short and left
		// so is a slow server: established I/O has no timeout).
		{"truncated", func(int32) []byte { return []byte{0x30, 0x0c, 0x02, 0x01, 0x01} }, 0, true, true},
		{"malformed bind response", func(id int32) []byte {
			return []byte{0x30, 0x06, 0x02, 0x01, byte(id), 0x61, 0x01, 0x0a}
		}, 0, true, false},
		{"notice of disconnection", func(int32) []byte {
			return wire.NoticeOfDisconnection(wire.ResultUnavailable, "going away")
		}, 0, true, false},
		{"oversized", func(int32) []byte { return []byte{0x30, 0x84, 0x7f, 0xff, 0xff, 0xff, 0x02, 0x01, 0x01} },
			ldap.LDAPResultAdminLimitExceeded, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := badServer(t, tc.answer, tc.hangUp)
			h := newHarness(t, dlpFile(3, 60, []server{{"BAD", bad, false}, {"L1", sl[0].Addr, false}},
				rule("ALICE", "(user="+alice+")", []string{"BAD", "L1"}, `"failover": 1`),
				proxy([]string{"ALICE"}, nil)), nil)
			c := h.dial(t)
			err := c.Bind(alice, "alice-pw")
			switch {
			case tc.code == 0 && err != nil:
				t.Fatalf("bind: %v; want a failover to L1", err)
			case tc.code != 0 && !ldap.IsErrorWithCode(err, tc.code):
				t.Fatalf("bind: %v; want result %d", err, tc.code)
			}
			if got := h.srv.Health().Offline("BAD"); got != tc.offline {
				t.Errorf("BAD offline = %v, want %v", got, tc.offline)
			}
			// The session goes on: a second operation is answered.
			if _, err := c.WhoAmI(nil); err != nil && tc.code == 0 {
				t.Errorf("whoami after the failover: %v", err)
			}
			c.Unbind()
			waitFor(t, "the session to end", func() bool { return activeConns(t, h) == 0 })
		})
	}
}
