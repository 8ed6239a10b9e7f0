package core

import "testing"

// TestEdgeKeyUntrustedShareOneQueue checks the handshake queue of a
// connection: the front's share when it gave one — every untrusted
// source in one queue, as at the front — else the measured host.
func TestEdgeKeyUntrustedShareOneQueue(t *testing.T) {
	for _, tt := range []struct {
		p    Peer
		want string
	}{
		{Peer{Measured: "198.51.100.1:4000", Share: "untrusted"}, "untrusted"},
		{Peer{Measured: "198.51.100.2:4001", Share: "untrusted"}, "untrusted"},
		{Peer{Measured: "192.0.2.10:5000", Share: "192.0.2.10"}, "192.0.2.10"},
		{Peer{Measured: "[::ffff:192.0.2.11]:5000"}, "192.0.2.11"},
		{Peer{Measured: "not an address"}, "not an address"},
	} {
		if got := edgeKey(tt.p); got != tt.want {
			t.Errorf("edgeKey(%+v) = %q, want %q", tt.p, got, tt.want)
		}
	}
}
