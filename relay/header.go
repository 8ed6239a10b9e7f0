package relay

import (
	"net"

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
