// Package inneraddr compares the address of an inner connection as the
// front's peer table records it (Peer.Inner, "ip:port") with a socket's
// address. The front (PeerTable.LookupAddr) and the LDAP core (the peer
// of a connection it accepted) both hold an entry found by port to the
// whole address; the core does not import the front, so the comparison
// lives here.
package inneraddr

import "net/netip"

// Is reports whether inner ("ip:port") is addr; IPv4-mapped IPv6
// addresses equal their IPv4 form.
func Is(inner string, addr netip.AddrPort) bool {
	a, err := netip.ParseAddrPort(inner)
	return err == nil && a.Port() == addr.Port() && a.Addr().Unmap() == addr.Addr().Unmap()
}
