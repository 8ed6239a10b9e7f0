// Package origin is the origin's front listener: the one place where a
// PROXY protocol header is read, where the address an edge claims for its
// client is kept apart from the address the front measured (the edge's
// socket), and where that pair survives the hop into an inner service that
// only sees a loopback port.
//
//	table := origin.NewPeerTable()
//	front, err := origin.New(cfg, table, log, prometheus.DefaultRegisterer)
//	go front.Serve(ln)                       // a *net.TCPListener
//	peer, ok := table.LookupAddr(innerRemoteAddr) // in the inner service, on accept
//
// Each connection's first bytes are peeked, never consumed: a PROXY v2
// signature or "PROXY " (v1) is parsed as a header (v2 by the front's own
// parser, v1 by github.com/pires/go-proxyproto's, with the size and time
// bounds applied here first); anything else — a TLS ClientHello, an LDAP PDU — is
// forwarded unchanged. A header is honoured only from Config.TrustedEdges;
// from anywhere else it is a spoof attempt and the connection is closed.
// Connections run on the event loops of internal/evloop (accept, header
// read, non-blocking dial to inner, read/write or splice): an idle
// forwarded connection holds its two sockets and no goroutine.
package origin
