package relay

import (
	"bytes"
	"errors"

	"github.com/edgefleet/edgefleet/internal/evloop"
	"github.com/edgefleet/edgefleet/internal/proxyheader"
)

// errClientProxy refuses a client whose first bytes are a PROXY header of
// its own: behind an edge with proxy_protocol off (or v1), the front would
// otherwise honour it as the trusted edge's claim.
var errClientProxy = errors.New("client sent a PROXY header of its own")

// screenProxy is the screen the edge passes to evloop.Conn.Relay: a whole v1 or v2
// signature refuses the client, a prefix of one waits for more, anything
// else (a TLS ClientHello, an LDAP PDU) passes at the first byte.
func screenProxy(b []byte) error {
	for _, sig := range [][]byte{proxyheader.SigV1, proxyheader.SigV2} {
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

// headerVersion is the PROXY protocol version proxy_protocol asks for,
// 0 for off.
func headerVersion(proxyProtocol string) int {
	switch proxyProtocol {
	case ProxyV2:
		return 2
	case ProxyV1:
		return 1
	}
	return 0
}
