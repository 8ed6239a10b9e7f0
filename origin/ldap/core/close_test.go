package core_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/go-ldap/ldap/v3"
)

// activeConns reads edgefleet_core_connections_active from the harness's
// registry.
func activeConns(t *testing.T, h *harness) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "edgefleet_core_connections_active" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// A client that gives up while its operation waits on a server that never
// answers (a frozen slapd: the kernel accepts, the process does not read)
// ends its session: the core notices the client's close and releases the
// client and backend connections and their goroutines. Established backend
// I/O has no timeout (docs/ldap-core.md), so nothing else would.
func TestClientClosesWhileServerHangs(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), nil)
	sl[0].Freeze()
	t.Cleanup(sl[0].Kill)
	for _, tc := range []struct {
		name string
		pdu  []byte
	}{
		{"bind", wire.BindRequest(1, alice, []byte("alice-pw"))},
		{"search", searchPDU(1, testbed.Suffix)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dials := h.dialCount(sl[0].Addr)
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			c.Write(tc.pdu)
			waitFor(t, "the core to dial L1", func() bool { return h.dialCount(sl[0].Addr) > dials })
			waitFor(t, "the session to start", func() bool { return activeConns(t, h) == 1 })
			c.Close()
			waitFor(t, "the session to end after the client closed", func() bool { return activeConns(t, h) == 0 })
			// The operation left unanswered is logged all the same.
			var lines []string
			for _, l := range h.logs.JSONLines("ldap op") {
				if l["op"] == tc.name {
					lines = append(lines, fmt.Sprint(l["target"], " ", l["result"]))
				}
			}
			if !slices.Equal(lines, []string{"L1 unanswered"}) {
				t.Errorf("%s lines: %q, want [\"L1 unanswered\"]", tc.name, lines)
			}
		})
	}
}

// A server that stops reading while the core writes a large request to it
// holds that write (established I/O has no timeout); a forced shutdown
// still ends the session and returns.
func TestShutdownWhileWriteToServerBlocks(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), nil)
	c, _ := h.rawBind(t, 1)
	defer c.Close()
	sl[0].Freeze()
	t.Cleanup(sl[0].Kill)
	// Modifies of 3.5 MiB each, more than the socket buffers between the
	// core and the frozen slapd hold.
	go func() {
		for i := range 6 {
			if _, err := c.Write(modifyPDU(int32(2+i), alice, 3500<<10)); err != nil {
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond) // let the core fill the buffers toward slapd
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() { h.srv.Shutdown(ctx); close(done) }()
	waitFor(t, "Shutdown to return", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	if n := activeConns(t, h); n != 0 {
		t.Errorf("%v connections active after Shutdown", n)
	}
	if h.srv.Health().Offline("L1") {
		t.Error("shutting down marked L1 OFFLINE")
	}
}

// modifyPDU replaces the description of dn with size bytes.
func modifyPDU(id int32, dn string, size int) []byte {
	long := func(tag byte, v ...[]byte) []byte {
		b := slices.Concat(v...)
		n := len(b)
		return append([]byte{tag, 0x84, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, b...)
	}
	value := bytes.Repeat([]byte("d"), size)
	change := long(0x30, []byte{0x0a, 0x01, 0x02}, long(0x30, long(0x04, []byte("description")), long(0x31, long(0x04, value))))
	op := long(wire.TagModifyRequest, long(0x04, []byte(dn)), long(0x30, change))
	return long(0x30, []byte{0x02, 0x04, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}, op)
}

// With TLS on, a client that connects and sends nothing is dropped after
// the handshake timeout, in DLP and in plain mode.
func TestSilentClientDropped(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	p := newPKI(t)
	withTLS := func(c *core.Config) {
		c.TLSMode = core.TLSOn
		c.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}}
		c.HandshakeTimeout = 200 * time.Millisecond
	}
	for _, tc := range []struct {
		name string
		h    func() *harness
	}{
		{"dlp", func() *harness {
			return newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), withTLS)
		}},
		{"plain", func() *harness {
			return newPlainHarness(t, "", func(c *core.Config) { c.DefaultServer = sl[0].Addr; withTLS(c) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h()
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			waitFor(t, "the session to start", func() bool { return activeConns(t, h) == 1 })
			waitFor(t, "the silent client to be dropped", func() bool { return activeConns(t, h) == 0 })
		})
	}
}

// A Notice of Disconnection reaches the client through the real front
// although the client sent more than the core read: the core shuts down
// writing, drains what is still coming for a moment, then closes (a close
// with unread input resets, and the reset overtook the notice).
func TestNoticeThroughFront(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	p := newPKI(t)
	// About 600 KB: more than the core reads before it answers, within
	// what it drains before it closes (drainMax, 1 MiB). Past drainMax
	// the close resets by design, and the reset may overtake the notice.
	more := bytes.Repeat(wire.BindRequest(1, alice, []byte("alice-pw")), 10000)
	for _, tc := range []struct {
		name  string
		h     func() *harness
		first []byte
		code  int
	}{
		{"message id 0", func() *harness {
			return newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), nil)
		}, []byte{0x30, 0x0c, 0x02, 0x01, 0x00, 0x60, 0x07, 0x02, 0x01, 0x03, 0x04, 0x00, 0x80, 0x00}, wire.ResultProtocolError},
		{"plain mode without TLS", func() *harness {
			return newPlainHarness(t, "", func(c *core.Config) {
				c.DefaultServer, c.TLSMode, c.TLS = sl[0].Addr, core.TLSOn, &tls.Config{Certificates: []tls.Certificate{p.server}}
			})
		}, wire.BindRequest(1, alice, []byte("alice-pw")), 13}, // confidentialityRequired
	} {
		t.Run(tc.name, func(t *testing.T) {
			front := tc.h().front(t)
			lost := 0
			for i := range 50 {
				c, err := net.Dial("tcp", front)
				if err != nil {
					t.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				go c.Write(append(slices.Clone(tc.first), more...))
				raw, err := wire.NewReader(c).Next()
				m, perr := wire.Parse(raw)
				if err != nil || perr != nil || m.ID != 0 || m.ResultCode != tc.code {
					lost++
					t.Logf("try %d: %v %v %+v", i, err, perr, m)
				}
				c.Close()
			}
			if lost > 0 {
				t.Errorf("%d of 50 notices lost", lost)
			}
		})
	}
}

// A client that starts a PDU and never completes it is disconnected after
// core.pdu_timeout, through the front (it held the front's two sockets and
// the core's); an idle client, which started none, is not.
func TestStartedPDUBounded(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})),
		func(c *core.Config) { c.PDUTimeout = 300 * time.Millisecond })
	front := h.front(t)
	idle, err := net.Dial("tcp", h.addr) // the front waits for a first byte (header_timeout) before it connects
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	waitFor(t, "the idle session", func() bool { return activeConns(t, h) == 1 })
	c, err := net.Dial("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{0x30, 0x0c, 0x02}) // a bind's first bytes
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if m := expectNotice(t, wire.NewReader(c), wire.ResultProtocolError); !strings.Contains(m.Diagnostic, "300ms") {
		t.Fatalf("notice %q does not name the bound", m.Diagnostic)
	}
	waitFor(t, "the session to end", func() bool { return activeConns(t, h) == 1 })
	// The idle client is still served.
	idle.SetDeadline(time.Now().Add(10 * time.Second))
	idle.Write(wire.BindRequest(1, alice, []byte("alice-pw")))
	if raw, err := wire.NewReader(idle).Next(); err != nil {
		t.Fatalf("the idle client: %v", err)
	} else if m, _ := wire.Parse(raw); m.ResultCode != wire.ResultSuccess {
		t.Fatalf("the idle client's bind: %+v", m)
	}
}

// Clients that stop reading in the middle of large searches cannot hold
// slapd's worker threads: after core.write_timeout their sessions end and
// their backend connections close, and a normal client is served.
func TestSlowReadersDoNotBlockOthers(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(3000), Threads: 8})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})),
		func(c *core.Config) {
			c.WriteTimeout = time.Second
			c.DialBackend = func(ctx context.Context, addr string) (net.Conn, error) {
				d := net.Dialer{Control: smallBuffers} // so that slapd's writes block soon
				return d.DialContext(ctx, "tcp", addr)
			}
		})
	const slow = 6
	for range slow {
		raw, err := (&net.Dialer{Control: smallBuffers}).Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		for j := range 20 {
			raw.Write(searchAttrsPDU(int32(1+j), "ou=bulk,"+testbed.Suffix, "*")) // 18 MB of entries, never read
		}
	}
	waitFor(t, "the slow readers' sessions", func() bool { return len(h.logs.JSONLines("ldap op")) == 0 && activeConns(t, h) == slow })
	c := h.dial(t)
	c.SetTimeout(20 * time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := c.Search(ldap.NewSearchRequest(alice, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
			"(objectClass=*)", []string{"uid"}, nil))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the normal client's search: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the normal client was not served while clients that stopped reading held the server")
	}
	// One write timeout after another as slapd gets to each slow reader's
	// searches: generous.
	waitWithin(t, 60*time.Second, "the slow readers to be disconnected", func() bool { return activeConns(t, h) <= 1 })
	if n := len(h.logs.JSONLines("client stopped reading: disconnected")); n != slow {
		t.Errorf("%d lines for clients that stopped reading, want %d", n, slow)
	}
	if h.srv.Health().Offline("L1") {
		t.Error("L1 is OFFLINE")
	}
}
