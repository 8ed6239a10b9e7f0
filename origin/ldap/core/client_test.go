package core_test

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/go-ldap/ldap/v3"
)

// Failures a client causes are that client's: answered or closed with a
// Notice of Disconnection, never an OFFLINE mark, never a replay on the
// next server. Each case runs against two slapds behind forwardto(L1,L2).

// bothUp checks that neither server was marked OFFLINE and that L2, the
// failover server, was never contacted.
func bothUp(t *testing.T, h *harness, sl []*testbed.Slapd) {
	t.Helper()
	for _, name := range []string{"L1", "L2"} {
		if h.srv.Health().Offline(name) {
			t.Errorf("%s is OFFLINE after a client's failure", name)
		}
	}
	if n := h.dialCount(sl[1].Addr); n != 0 {
		t.Errorf("L2 dialed %d times: a client's failure was replayed on the next server", n)
	}
	if lines := h.logs.JSONLines("server offline"); len(lines) != 0 {
		t.Errorf("server offline lines: %v", lines)
	}
}

// rawConn connects to the core without a client library.
func rawConn(t *testing.T, h *harness) (net.Conn, *wire.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c, wire.NewReader(c)
}

// expectNotice reads up to a Notice of Disconnection with code, then the
// end of the connection.
func expectNotice(t *testing.T, r *wire.Reader, code int) *wire.Message {
	t.Helper()
	for {
		raw, err := r.Next()
		if err != nil {
			t.Fatalf("no notice of disconnection: %v", err)
		}
		m, err := wire.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != 0 {
			continue
		}
		if m.Op != wire.TagExtendedResponse || m.ExtOID != wire.OIDNoticeOfDisconnection || m.ResultCode != code {
			t.Fatalf("id 0: %+v, want a notice of disconnection with %s", m, wire.ResultName(code))
		}
		if _, err := r.Next(); err == nil {
			t.Fatal("the connection goes on after the notice")
		}
		return m
	}
}

// A request with message id 0 (reserved for notifications, RFC 4511
// §4.1.1.1; slapd answers it with id 0, which reads as its notice of
// disconnection) is refused by the core: it never reaches a server.
func TestClientMessageIDZero(t *testing.T) {
	sl, h := twoServers(t, testbed.SlapdConfig{}, nil)
	c, r := rawConn(t, h)
	c.Write([]byte{0x30, 0x0c, 0x02, 0x01, 0x00, 0x60, 0x07, 0x02, 0x01, 0x03, 0x04, 0x00, 0x80, 0x00}) // the packet
	expectNotice(t, r, wire.ResultProtocolError)
	if n := h.dialCount(sl[0].Addr); n != 0 {
		t.Errorf("L1 dialed %d times for a request with message id 0", n)
	}
	bothUp(t, h, sl)
	if n := bindSearchUnbind(t, h, alice, "alice-pw"); n != 3 {
		t.Errorf("the next client got %d entries", n)
	}
}

// A request slapd cannot decode (the core parses an add or a compare only
// shallowly) gets slapd's notice of disconnection (protocolError): the
// client gets one too and its session ends; the server stays up.
func TestClientMalformedRequest(t *testing.T) {
	for name, pdu := range map[string][]byte{
		"add":     {0x30, 0x0a, 0x02, 0x01, 0x02, 0x68, 0x05, 0x04, 0x00, 0x02, 0x01, 0x05},
		"compare": {0x30, 0x0a, 0x02, 0x01, 0x02, 0x6e, 0x05, 0x04, 0x00, 0x02, 0x01, 0x05},
	} {
		t.Run(name, func(t *testing.T) {
			sl, h := twoServers(t, testbed.SlapdConfig{}, nil)
			c, r := h.rawBind(t, 1)
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			c.Write(pdu)
			if m := expectNotice(t, r, wire.ResultProtocolError); !strings.Contains(m.Diagnostic, "L1") {
				t.Errorf("notice %q does not name the server", m.Diagnostic)
			}
			bothUp(t, h, sl)
		})
	}
}

// pipeline sends n anonymous searches of ou=bulk in one go and counts the
// results by code.
func pipeline(t *testing.T, h *harness, n int) map[int]int {
	t.Helper()
	c, r := rawConn(t, h)
	var buf bytes.Buffer
	for i := 1; i <= n; i++ {
		buf.Write(searchPDU(int32(i), "ou=bulk,"+testbed.Suffix))
	}
	go c.Write(buf.Bytes())
	codes := map[int]int{}
	for done := 0; done < n; {
		raw, err := r.Next()
		if err != nil {
			t.Fatalf("after %d results (%v): %v", done, codes, err)
		}
		m, err := wire.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID == 0 {
			t.Fatalf("notice of disconnection after %d results: %+v", done, m)
		}
		if m.Op == wire.TagSearchResultDone {
			codes[m.ResultCode]++
			done++
		}
	}
	// The connection is still usable.
	c.Write(searchPDU(int32(n+1), alice))
	for {
		raw, err := r.Next()
		if err != nil {
			t.Fatalf("search after the pipeline: %v", err)
		}
		if m, _ := wire.Parse(raw); m.ID == int32(n+1) && m.Op == wire.TagSearchResultDone {
			if m.ResultCode != 0 {
				t.Errorf("search after the pipeline: %s %q", wire.ResultName(m.ResultCode), m.Diagnostic)
			}
			break
		}
	}
	return codes
}

// More pipelined operations (1,000) than slapd takes on one connection
// (conn_max_pending, 100 anonymous): the core answers those beyond
// core.max_pending busy itself, and slapd never closes the connection.
func TestClientPendingCap(t *testing.T) {
	sl, h := twoServers(t, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(300)}, nil)
	codes := pipeline(t, h, 1000)
	t.Logf("results: %v", codes)
	if codes[wire.ResultBusy] == 0 || codes[wire.ResultSuccess] == 0 || codes[wire.ResultSuccess]+codes[wire.ResultBusy] != 1000 {
		t.Errorf("results %v: want success and busy only", codes)
	}
	bothUp(t, h, sl)
}

// With core.max_pending above slapd's conn_max_pending, slapd closes the
// connection itself: the server accepts connections, so the close was this
// client's doing; its searches are answered, not replayed on L2.
func TestServerClosesOnClient(t *testing.T) {
	sl, h := twoServers(t, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(300)}, func(c *core.Config) { c.MaxPending = 5000 })
	codes := pipeline(t, h, 1000)
	t.Logf("results: %v", codes)
	if codes[wire.ResultUnavailable] == 0 || codes[wire.ResultBusy] != 0 {
		t.Errorf("results %v: want slapd to have closed the connection (unavailable)", codes)
	}
	bothUp(t, h, sl)
	if len(h.logs.JSONLines("server closed the connection of this client")) == 0 {
		t.Error("no line for the server's close")
	}
}

// A local process that connects to core.listen from another loopback
// address with the port of a live inner connection (GET /peers lists
// them) does not wear that connection's identity: the core matches the
// whole address, logs the mismatch as [unexpected] and uses no peer.
func TestPeerByWholeAddress(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), nil)
	front := h.front(t)

	// The victim, through the front, with a header claiming 192.0.2.7;
	// the thief: another loopback address, the victim's inner port. Other
	// tests running beside this one may hold that port on the thief's
	// address: then a new victim connection gets a new port. (127.0.0.199:
	// edges in other packages dial from 127.0.0.2 with ports chosen by
	// connect, which the kernel may share with the victim's inner socket,
	// so on 127.0.0.2 every attempt could find its port taken.)
	var tc net.Conn
	for attempt := 0; tc == nil; attempt++ {
		raw, err := net.Dial("tcp", front)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		raw.Write([]byte("PROXY TCP4 192.0.2.7 127.0.0.1 4711 8636\r\n"))
		victim := ldap.NewConn(raw, false)
		victim.Start()
		if err := victim.Bind(alice, "alice-pw"); err != nil {
			t.Fatal(err)
		}
		var port int
		for _, p := range h.table.Peers() {
			if p.Claimed == "192.0.2.7:4711" {
				port = p.InnerPort
			}
		}
		if port == 0 {
			t.Fatalf("no peer table entry for the victim: %+v", h.table.Peers())
		}
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 199), Port: port}, Timeout: 5 * time.Second}
		tc, err = d.Dial("tcp", h.addr)
		if errors.Is(err, syscall.EADDRINUSE) && attempt < 20 {
			victim.Close()
			waitFor(t, "the victim's entry to go", func() bool {
				_, ok := h.table.Lookup(port)
				return !ok
			})
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	thief := ldap.NewConn(tc, false)
	thief.Start()
	defer thief.Close()
	if err := thief.Bind(bob, "bob-pw"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both binds", func() bool { return len(h.targets("bind")) == 2 })
	for _, l := range h.logs.JSONLines("ldap op") {
		if l["user"] != bob {
			if l["claimed"] != "192.0.2.7:4711" {
				t.Errorf("the victim's line lost its peer: %v", l)
			}
			continue
		}
		if l["claimed"] != "" || l["edge"] != "" || !strings.HasPrefix(l["measured"].(string), "127.0.0.199:") ||
			!strings.HasPrefix(l["id"].(string), "core-") {
			t.Errorf("the thief's line carries another connection's peer: %v", l)
		}
	}
	if !strings.Contains(h.logs.String(), "[unexpected] a peer table entry for the client's port belongs to another address") {
		t.Error("no [unexpected] line for the mismatch")
	}
}

// The client bounds are checked with the name of their key.
func TestConfigClientBounds(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*core.Config)
		want string
	}{
		{func(c *core.Config) { c.MaxPending = 0 }, "core.max_pending: 0 is below 1"},
		{func(c *core.Config) { c.MaxPendingAuth = -1 }, "core.max_pending_auth: -1 is below 1"},
		{func(c *core.Config) { c.PDUTimeout = -time.Second }, "core.pdu_timeout: -1s is negative"},
		{func(c *core.Config) { c.WriteTimeout = -time.Second }, "core.write_timeout: -1s is negative"},
	} {
		c := core.DefaultConfig()
		c.DefaultServer = "127.0.0.1:389"
		tc.mod(&c)
		if err := c.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("Validate: %v, want %q", err, tc.want)
		}
	}
	d := core.DefaultConfig()
	if d.MaxPending != 100 || d.MaxPendingAuth != 1000 || d.PDUTimeout != 30*time.Second || d.WriteTimeout != 30*time.Second {
		t.Errorf("defaults %+v", d)
	}
}
