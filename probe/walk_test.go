package probe

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestDialWalk: the walk of the name's addresses on real sockets, as Go's
// dialer walks them: in the resolver's order, past a black hole (its
// share of the time) and a refusal, the other family at once when the
// first one's addresses have all failed, and only the source's family
// when a source is set.
func TestDialWalk(t *testing.T) {
	// The live port must also be free on 127.0.0.2 for the black hole;
	// another process may hold it there: take another port then.
	var live net.Listener
	var port int
	for try := 0; ; try++ {
		l, err := net.Listen("tcp", "127.0.0.3:0")
		if err != nil {
			t.Fatal(err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		_, closeHole, err := testbed.NewBlackHoleAt("127.0.0.2:" + strconv.Itoa(port))
		if err == nil {
			live = l
			t.Cleanup(closeHole)
			break
		}
		l.Close()
		if try == 20 {
			t.Fatalf("no port free on both 127.0.0.3 and 127.0.0.2: %v", err)
		}
	}
	defer live.Close()
	go func() {
		for {
			c, err := live.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	v6 := netip.MustParseAddr("::1") // nothing listens on port there: refused
	a2, a3, a4 := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.4")
	for _, tc := range []struct {
		name   string
		source string
		ips    []netip.Addr
		want   string // "" : an error
	}{
		{"black hole, then live", "", []netip.Addr{a2, a3}, "127.0.0.3"},
		{"refused, then live", "", []netip.Addr{a4, a3}, "127.0.0.3"},
		{"the first family refused, the other", "", []netip.Addr{v6, a3}, "127.0.0.3"},
		{"resolver order, not sorted", "", []netip.Addr{a3, a2}, "127.0.0.3"},
		{"the source's family only", "127.0.0.1", []netip.Addr{v6, a3}, "127.0.0.3"},
		{"no address of the source's family", "::1", []netip.Addr{a3}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Source: tc.source}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := dialWalk(ctx, cfg.dialer(), tc.ips, port)
			if tc.want == "" {
				if err == nil {
					c.Close()
					t.Fatalf("connected to %s, want an error", c.RemoteAddr())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if host, _, _ := net.SplitHostPort(c.RemoteAddr().String()); host != tc.want {
				t.Fatalf("connected to %s, want %s", c.RemoteAddr(), tc.want)
			}
		})
	}
}
