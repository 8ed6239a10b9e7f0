package listenaddr

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Overlap reports two addresses of listen that cannot both be bound
// on Linux: the same port and the same address, or the same port and one
// of them a wildcard. Go listens on ":636", "0.0.0.0:636" and "[::]:636"
// with one dual-stack socket (IPv4 and IPv6 whatever
// net.ipv6.bindv6only says), and a wildcard holds the port on every
// address, so [":636", "[::]:636"] fails at start with "address already
// in use" — the second entry is never needed. Port 0 never overlaps. It
// depends on no host state, so it runs wherever a configuration is
// checked.
func Overlap(listen []string) error {
	type bound struct {
		spec, host, port string
	}
	var seen []bound
	for _, l := range listen {
		host, port, err := net.SplitHostPort(l)
		if err != nil {
			continue // the caller's own validation names it
		}
		for _, b := range seen {
			if !samePort(b.port, port) {
				continue
			}
			switch {
			case wildcard(b.host) && wildcard(host):
				return fmt.Errorf("%q and %q are the same socket: a wildcard listens on IPv4 and IPv6 at once (give one of them)", b.spec, l)
			case wildcard(b.host) || wildcard(host):
				return fmt.Errorf("%q and %q overlap: the wildcard already listens on every address of port %s (give one of them)", b.spec, l, port)
			case sameListenHost(b.host, host):
				return fmt.Errorf("%q and %q are the same address", b.spec, l)
			}
		}
		seen = append(seen, bound{l, host, port})
	}
	return nil
}

// sameListenHost: two listen hosts that are one address (an IPv4-mapped one is
// its IPv4 twin), or one name spelt alike.
func sameListenHost(a, b string) bool {
	x, errx := netip.ParseAddr(a)
	y, erry := netip.ParseAddr(b)
	if errx == nil && erry == nil {
		return x.Unmap() == y.Unmap()
	}
	return strings.EqualFold(a, b)
}
