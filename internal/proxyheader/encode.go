package proxyheader

import (
	"net"
	"net/netip"

	"github.com/pires/go-proxyproto"
)

// Format renders the PROXY header of the given version (1 or 2) for a
// client connection: the client as source, the edge's local address as
// destination and, for v2, the connection id (PP2_TYPE_UNIQUE_ID) and the
// edge name (TLVEdgeName). It returns nil for version 0 (no header).
func Format(version int, client, local net.Addr, id, name string) ([]byte, error) {
	var h *proxyproto.Header
	switch version {
	case 0:
		return nil, nil
	case 1:
		h = proxyproto.HeaderProxyFromAddrs(1, client, local)
	default:
		h = proxyproto.HeaderProxyFromAddrs(2, client, local)
		if err := h.SetTLVs([]proxyproto.TLV{
			{Type: proxyproto.PP2_TYPE_UNIQUE_ID, Value: []byte(id)},
			{Type: TLVEdgeName, Value: []byte(name)},
		}); err != nil {
			return nil, err
		}
	}
	return h.Format()
}

// Append is Format appended to dst. The v2 header of a
// TCP connection, the one every connection sends by default, is written
// by hand without allocating (TestAppend checks it byte for
// byte against go-proxyproto); anything else goes through go-proxyproto.
func Append(dst []byte, version int, client, local netip.AddrPort, id, name string) ([]byte, error) {
	if version != 2 || !client.IsValid() || !local.IsValid() || len(id) > 0xffff || len(name) > 0xffff {
		h, err := Format(version, net.TCPAddrFromAddrPort(client), net.TCPAddrFromAddrPort(local), id, name)
		return append(dst, h...), err
	}
	dst = append(dst, SigV2...)
	dst = append(dst, 0x21) // version 2, PROXY
	sa, da := client.Addr().Unmap(), local.Addr().Unmap()
	fam := byte(0x11) // TCP over IPv4
	var s4, d4 [4]byte
	var s16, d16 [16]byte
	sip, dip := s4[:], d4[:]
	if sa.Is4() && da.Is4() {
		s4, d4 = sa.As4(), da.As4()
	} else {
		s16, d16 = sa.As16(), da.As16()
		fam, sip, dip = 0x21, s16[:], d16[:]
	}
	length := 2*len(sip) + 4 + 3 + len(id) + 3 + len(name)
	dst = append(dst, fam, byte(length>>8), byte(length))
	dst = append(dst, sip...)
	dst = append(dst, dip...)
	sp, dp := client.Port(), local.Port()
	dst = append(dst, byte(sp>>8), byte(sp), byte(dp>>8), byte(dp))
	dst = append(dst, byte(proxyproto.PP2_TYPE_UNIQUE_ID), byte(len(id)>>8), byte(len(id)))
	dst = append(dst, id...)
	dst = append(dst, byte(TLVEdgeName), byte(len(name)>>8), byte(len(name)))
	return append(dst, name...), nil
}
