package origin

import (
	"net"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestLinkLocalPeerNeverTrusted runs the front in a network namespace
// whose veth carries a link-local and a global address, with
// trusted_edges ::/0 (which covers fe80::/10): a PROXY header from the
// peer's link-local address is a spoof (closed, counted), the same
// header from the peer's global address on the same link is honoured.
// The peer arrives through the event loops' accept, whose address has no
// zone: this is the path a link-local edge really takes.
func TestLinkLocalPeerNeverTrusted(t *testing.T) {
	front := testbed.NewNetns(t, "llfront")
	edge := testbed.NewNetns(t, "lledge")
	testbed.Veth(t, front, "llf", edge, "lle")
	for _, s := range []struct {
		ns    *testbed.Netns
		dev   string
		addrs []string
	}{{front, "llf", []string{"fe80::1/64", "2001:db8:7::1/64"}}, {edge, "lle", []string{"fe80::7/64", "2001:db8:7::7/64"}}} {
		for _, a := range s.addrs {
			s.ns.Run("ip", "-6", "addr", "add", a, "dev", s.dev, "nodad")
		}
		s.ns.Run("ip", "link", "set", s.dev, "up")
	}
	ln := front.Listen("[::]:0")
	port := ln.Addr().(*net.TCPAddr).Port
	h := newHarnessOn(t, ln, nil, func(c *Config) { c.TrustedEdges = []string{"::/0"} })

	dial := func(local, remote *net.TCPAddr) net.Conn {
		t.Helper()
		var c net.Conn
		err := edge.Do(func() error {
			d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: local}
			var err error
			c, err = d.Dial("tcp", remote.String())
			return err
		})
		if err != nil {
			t.Fatalf("dial %s from %s: %v", remote, local, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	header := v2Header(t, "203.0.113.9:40000", "192.0.2.1:636", "e1", "id1")

	ll := dial(&net.TCPAddr{IP: net.ParseIP("fe80::7"), Zone: "lle"}, &net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: port, Zone: "lle"})
	ll.Write(append(header, payload...))
	expectClosed(t, ll)
	eventually(t, "spoofed header counted", func() bool {
		return h.metric("edgefleet_origin_spoofed_headers_total", nil) == 1
	})
	if lines := h.logs.JSONLines("spoofed proxy header"); len(lines) != 1 || hostOf(t, lines[0]["measured"].(string)) != "fe80::7" {
		t.Errorf("spoof log lines: %v", lines)
	}

	global := dial(&net.TCPAddr{IP: net.ParseIP("2001:db8:7::7")}, &net.TCPAddr{IP: net.ParseIP("2001:db8:7::1"), Port: port})
	p := roundTrip(t, global, header, payload)
	if p.Claimed != "203.0.113.9:40000" || hostOf(t, p.Measured) != "2001:db8:7::7" {
		t.Errorf("global peer: claimed %q measured %q, want the header's claim from 2001:db8:7::7", p.Claimed, p.Measured)
	}
}
