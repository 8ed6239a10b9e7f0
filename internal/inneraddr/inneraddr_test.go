package inneraddr

import (
	"net/netip"
	"testing"
)

func TestIs(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, tt := range []struct {
		inner string
		addr  netip.AddrPort
		want  bool
	}{
		{"127.0.0.1:40000", ap("127.0.0.1:40000"), true},
		{"127.0.0.1:40000", ap("[::ffff:127.0.0.1]:40000"), true},
		{"[::ffff:127.0.0.1]:40000", ap("127.0.0.1:40000"), true},
		{"127.0.0.1:40000", ap("127.0.0.2:40000"), false}, // another loopback address, same port
		{"127.0.0.1:40000", ap("127.0.0.1:40001"), false},
		{"[::1]:40000", ap("[::1]:40000"), true},
		{"", ap("127.0.0.1:40000"), false},
		{"not an address", ap("127.0.0.1:40000"), false},
	} {
		if got := Is(tt.inner, tt.addr); got != tt.want {
			t.Errorf("Is(%q, %v) = %v, want %v", tt.inner, tt.addr, got, tt.want)
		}
	}
}
