// Package proxyheader holds both sides of the PROXY protocol as edgefleet
// speaks it: the v1 and v2 headers the edge writes (Format, Append) and
// the sniffing and allocation-free v2 parse the front reads them with
// (Sniff, Len, Read), with the signatures and the TLV the two agree on.
// go-proxyproto is the reference both sides are tested against; it is
// imported here as proxyproto, hence this package's name.
package proxyheader

import proxyproto "github.com/pires/go-proxyproto"

// TLVEdgeName is the custom PROXY v2 TLV that carries the edge's name.
const TLVEdgeName proxyproto.PP2Type = 0xE0

// The signatures a v1 line and a v2 header start with.
var (
	SigV1 = []byte("PROXY ")
	SigV2 = proxyproto.SIGV2
)

// Header values of Info.Header (and HeaderNone for a connection without
// a header).
const (
	HeaderV2    = "v2"    // a PROXY v2 header with the client's address
	HeaderV1    = "v1"    // a PROXY v1 line with the client's address
	HeaderLocal = "local" // a v2 LOCAL header or a v1 UNKNOWN line: no client address
	HeaderNone  = "none"  // no header: the connection was forwarded as it came
)
