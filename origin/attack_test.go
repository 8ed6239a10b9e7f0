package origin

import (
	"bufio"
	"context"
	"io"
	"net"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestInnerByNameReadsNoSecondHeader: with front.inner given by name the
// lookup runs off the loop after the header was taken; client bytes that
// arrive meanwhile are payload. They were read as a new first segment and
// examined again: a "PROXY" line the client sent behind the trusted edge's
// header replaced the edge's claim (the client wore an identity of its
// choosing), and a second dial went out for the same connection.
func TestInnerByNameReadsNoSecondHeader(t *testing.T) {
	n := testbed.StartNamed(t, testbed.NamedConfig{Zone: "example.test", Records: []string{"inner IN A 127.0.0.1"}})
	release := make(chan struct{})
	old := net.DefaultResolver
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		select { // the lookup waits until the client's second segment is in
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, n.Addr)
	}}
	t.Cleanup(func() { net.DefaultResolver = old })
	h := newHarness(t, func(c *Config) {
		_, port, _ := net.SplitHostPort(c.Inner)
		c.Inner = net.JoinHostPort("inner.example.test", port)
	})
	c := h.dialFrom("127.0.0.2") // a trusted edge
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "PROXY TCP4 198.51.100.7 203.0.113.1 50312 636\r\n")
	time.Sleep(100 * time.Millisecond) // separate segments: the front reads the header and starts the lookup
	spoof := "PROXY TCP4 6.6.6.6 203.0.113.1 6666 636\r\nhello"
	io.WriteString(c, spoof)
	time.Sleep(100 * time.Millisecond) // read by the loop while the lookup waits
	close(release)
	r := bufio.NewReader(c)
	if p := readPeer(t, r); p.Claimed != "198.51.100.7:50312" {
		t.Errorf("the inner service sees claimed %q, want the edge's 198.51.100.7:50312", p.Claimed)
	}
	echo := make([]byte, len(spoof))
	if _, err := io.ReadFull(r, echo); err != nil || string(echo) != spoof {
		t.Errorf("inner got %q (%v), want the client's bytes %q unchanged", echo, err, spoof)
	}
	c.Close()
	eventually(t, "one dial", func() bool { return h.inner.count() == 1 })
	time.Sleep(100 * time.Millisecond)
	if got := h.inner.count(); got != 1 {
		t.Errorf("inner accepted %d connections for one client, want 1", got)
	}
}

// TestAttackFrontEveryStageLeavesNothing runs connections that end at
// every stage of the front — forwarded, reset at once, reset after the
// header, a header cut short, an oversized v2 length, a header from an
// untrusted source, beyond max_conns — and checks that afterwards no
// slot, peer entry, loopguard.Own entry or descriptor is left.
func TestAttackFrontEveryStageLeavesNothing(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxConns = 8 })
	hdr := v2Header(t, "192.0.2.10:50000", "198.51.100.1:636", "edge-ams-1", "a1b2c3d4")
	rst := func(c *net.TCPConn) { c.SetLinger(0); c.Close() }
	fds := func() int { return testbed.OpenFDs(0) }
	warm := h.dialFrom("127.0.0.2")
	roundTrip(t, warm, hdr, []byte("warm"))
	warm.Close()
	h.settled()
	runtime.GC()
	fd0 := fds()
	for i := range 140 {
		switch i % 7 {
		case 0:
			c := h.dialFrom("127.0.0.2")
			roundTrip(t, c, hdr, []byte("x"))
			c.Close()
		case 1:
			rst(h.dialFrom("127.0.0.2"))
		case 2:
			c := h.dialFrom("127.0.0.2")
			c.Write(append(append([]byte{}, hdr...), 'y'))
			rst(c)
		case 3:
			c := h.dialFrom("127.0.0.2")
			c.Write(hdr[:20])
			c.CloseWrite()
			expectClosed(t, c)
			c.Close()
		case 4:
			c := h.dialFrom("127.0.0.2")
			big := append([]byte{}, hdr[:16]...)
			big[14], big[15] = 0xff, 0xff
			c.Write(big)
			expectClosed(t, c)
			c.Close()
		case 5:
			c := h.dialFrom("127.0.0.3") // untrusted, with a header
			c.Write(hdr)
			expectClosed(t, c)
			c.Close()
		case 6:
			var cs []*net.TCPConn
			before := h.counted()
			for range 12 {
				cs = append(cs, h.dialFrom("127.0.0.2"))
			}
			for _, c := range cs {
				rst(c)
			}
			// All twelve accepted and counted before the next stage: on a
			// busy host some wait in the kernel's accept queue after
			// settled holds, and the next stage's connection would then be
			// the ninth.
			eventually(t, "twelve more connections counted", func() bool { return h.counted() == before+12 })
			h.settled()
		}
	}
	h.settled()
	eventually(t, "nothing left", func() bool {
		runtime.GC()
		active := h.front.shell.Active()
		v := reflect.ValueOf(h.front.own).Elem()
		mu := (*sync.Mutex)(unsafe.Pointer(v.FieldByName("mu").UnsafeAddr()))
		mu.Lock()
		out, in := v.FieldByName("out").Len(), v.FieldByName("in").Len()
		mu.Unlock()
		ok := active == 0 && out == 0 && in == 0 && h.table.Len() == 0 && fds() <= fd0
		if !ok {
			t.Logf("active %d, own out %d in %d, peers %d, descriptors %d (were %d)", active, out, in, h.table.Len(), fds(), fd0)
		}
		return ok
	})
}
