package relay

import (
	"bytes"
	"errors"
	"net"
	"net/netip"

	"github.com/edgefleet/edgefleet/internal/evloop"
	"github.com/pires/go-proxyproto"
)

// TLVEdgeName is the custom PROXY v2 TLV that carries the edge's name.
const TLVEdgeName proxyproto.PP2Type = 0xE0

// proxyHeader renders the PROXY header for a client connection: the client
// as source, the edge's local address as destination and, for v2, the
// connection id (PP2_TYPE_UNIQUE_ID) and the edge name (0xE0). It returns
// nil for "off".
func proxyHeader(version string, client, local net.Addr, id, name string) ([]byte, error) {
	var h *proxyproto.Header
	switch version {
	case ProxyOff:
		return nil, nil
	case ProxyV1:
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

// appendProxyHeader is proxyHeader appended to dst. The v2 header of a
// TCP connection, the one every connection sends by default, is written
// by hand without allocating (TestAppendProxyHeader checks it byte for
// byte against go-proxyproto); anything else goes through go-proxyproto.
func appendProxyHeader(dst []byte, version string, client, local netip.AddrPort, id, name string) ([]byte, error) {
	if version != ProxyV2 || !client.IsValid() || !local.IsValid() || len(id) > 0xffff || len(name) > 0xffff {
		h, err := proxyHeader(version, net.TCPAddrFromAddrPort(client), net.TCPAddrFromAddrPort(local), id, name)
		return append(dst, h...), err
	}
	dst = append(dst, sigV2...)
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

// The PROXY signatures a client's first bytes must not start with: the
// edge's own header is the only one the origin may see.
var (
	sigV1 = []byte("PROXY ")
	sigV2 = proxyproto.SIGV2
)

// errClientProxy refuses a client whose first bytes are a PROXY header of
// its own: behind an edge with proxy_protocol off (or v1), the front would
// otherwise honour it as the trusted edge's claim.
var errClientProxy = errors.New("client sent a PROXY header of its own")

// screenProxy is the screen the edge passes to evloop.Conn.Relay: a whole v1 or v2
// signature refuses the client, a prefix of one waits for more, anything
// else (a TLS ClientHello, an LDAP PDU) passes at the first byte.
func screenProxy(b []byte) error {
	for _, sig := range [][]byte{sigV1, sigV2} {
		n := min(len(b), len(sig))
		if bytes.Equal(b[:n], sig[:n]) {
			if n == len(sig) {
				return errClientProxy
			}
			return evloop.ErrMore
		}
	}
	return nil
}
