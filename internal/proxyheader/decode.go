package proxyheader

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	proxyproto "github.com/pires/go-proxyproto"
)

// MaxV2Length is the largest value of a v2 header's length field (address
// block plus TLVs) the front accepts; a longer header is refused as soon as
// its 16-byte prefix has arrived, without waiting for or buffering the rest.
// Our edge sends well under 200 bytes; 4 KiB leaves room for the SSL TLVs
// HAProxy can add.
const MaxV2Length = 4096

const (
	PrefixLenV2 = 16  // signature, version/command, family, length
	maxV1Len    = 107 // the longest v1 line the spec allows, CRLF included
	// BufSize holds the longest header Len accepts in one buffer.
	BufSize = PrefixLenV2 + MaxV2Length
)

// Kind is what the first bytes of a connection turned out to be.
type Kind int

const (
	None Kind = iota // not a PROXY header: forward unchanged
	V1
	V2
)

// String is the Header value of a header of kind k.
func (k Kind) String() string {
	return [...]string{HeaderNone, HeaderV1, HeaderV2}[k]
}

var (
	// errOversized: a v2 length field above MaxV2Length.
	errOversized = fmt.Errorf("proxy v2 header longer than %d bytes", MaxV2Length)
	errV1TooLong = fmt.Errorf("proxy v1 line longer than %d bytes", maxV1Len)
)

// Sniff tells whether the first bytes b of a connection start a PROXY
// header. It decides as soon as the bytes seen so far rule out both
// signatures, so a client that sends one byte of something else and waits
// for an answer is forwarded at once; decided is false while b is empty or
// a proper prefix of a signature. A connection that ends (eof) partway
// through a signature is forwarded as it came: only a whole signature
// makes a header.
func Sniff(b []byte, eof bool) (k Kind, decided bool) {
	switch {
	case len(b) == 0:
		return None, false
	case bytes.HasPrefix(b, SigV2):
		return V2, true
	case bytes.HasPrefix(b, SigV1):
		return V1, true
	case !bytes.HasPrefix(SigV2, b) && !bytes.HasPrefix(SigV1, b):
		return None, true
	}
	return None, eof
}

// Len is the length of the whole header of kind k that b starts
// with, or 0 while more bytes are needed. A v2 length field above
// MaxV2Length is refused as soon as the 16-byte prefix is in, and a v1
// line without its end within maxV1Len bytes as soon as those are in.
func Len(b []byte, k Kind) (int, error) {
	switch k {
	case V2:
		if len(b) < PrefixLenV2 {
			return 0, nil
		}
		length := int(binary.BigEndian.Uint16(b[14:16]))
		if length > MaxV2Length {
			return 0, errOversized
		}
		if len(b) < PrefixLenV2+length {
			return 0, nil
		}
		return PrefixLenV2 + length, nil
	case V1:
		if i := bytes.IndexByte(b[:min(len(b), maxV1Len)], '\n'); i >= 0 {
			return i + 1, nil
		}
		if len(b) >= maxV1Len {
			return 0, errV1TooLong
		}
	}
	return 0, nil
}

// parseHeader parses b, exactly one whole header (Len's).
func parseHeader(b []byte) (*proxyproto.Header, error) {
	r := readers.Get().(*bufio.Reader)
	br := bytes.NewReader(b)
	r.Reset(br)
	h, err := proxyproto.Read(r)
	r.Reset(nil)
	readers.Put(r)
	return h, err
}

// Truncated is the error of a header cut short by err: io.EOF becomes
// io.ErrUnexpectedEOF, any other error is kept.
func Truncated(err error) error {
	if err == io.EOF {
		return fmt.Errorf("truncated proxy header: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// Read parses b, exactly one whole header of kind k (Len's),
// into what it carries. A v2 header is parsed here, without an
// allocation beyond the strings it yields; a v1 line goes through
// go-proxyproto. Both accept and refuse exactly what go-proxyproto's Read
// and interpret do, with the same errors (FuzzParseV2 holds them to it).
func Read(b []byte, k Kind) (Info, error) {
	if k == V2 {
		return parseV2(b)
	}
	h, err := parseHeader(b)
	if err != nil {
		return Info{}, err
	}
	return interpret(h)
}

// v2 address blocks: two addresses and, for IP, two ports.
const (
	v2AddrLen4    = 12
	v2AddrLen6    = 36
	v2AddrLenUnix = 216
)

// parseV2 is go-proxyproto's parseVersion2 followed by interpret, for b a
// whole v2 header (signature included): the checks of the command, the
// family and the length in the same order and with the same errors; the
// client's address from a PROXY command over TCP; the unique id and edge
// name from the TLVs.
func parseV2(b []byte) (Info, error) {
	cmd, fam := proxyproto.ProtocolVersionAndCommand(b[12]), proxyproto.AddressFamilyAndProtocol(b[13])
	if cmd != proxyproto.LOCAL && cmd != proxyproto.PROXY {
		return Info{}, proxyproto.ErrUnsupportedProtocolVersionAndCommand
	}
	var addrLen int
	switch fam {
	case proxyproto.UNSPEC:
		if cmd != proxyproto.LOCAL {
			return Info{}, proxyproto.ErrUnsupportedAddressFamilyAndProtocol
		}
	case proxyproto.TCPv4, proxyproto.UDPv4:
		addrLen = v2AddrLen4
	case proxyproto.TCPv6, proxyproto.UDPv6:
		addrLen = v2AddrLen6
	case proxyproto.UnixStream, proxyproto.UnixDatagram:
		addrLen = v2AddrLenUnix
	default:
		return Info{}, proxyproto.ErrUnsupportedAddressFamilyAndProtocol
	}
	length := int(binary.BigEndian.Uint16(b[14:16]))
	info := Info{Header: HeaderV2}
	if cmd == proxyproto.LOCAL {
		info.Header = HeaderLocal
	}
	if length < addrLen { // a LOCAL block that does not fit its family: skipped whole
		if cmd == proxyproto.LOCAL && length <= int(proxyproto.MaxV2HeaderSize) {
			return info, nil
		}
		return Info{}, proxyproto.ErrInvalidLength
	}
	if length == 0 {
		return info, nil
	}
	if length > int(proxyproto.MaxV2HeaderSize) {
		return Info{}, proxyproto.ErrInvalidLength
	}
	block := b[PrefixLenV2 : PrefixLenV2+length]
	if cmd == proxyproto.PROXY && fam.IsStream() && !fam.IsUnix() {
		var ip netip.Addr
		var port uint16
		if fam.IsIPv4() {
			ip, port = netip.AddrFrom4([4]byte(block[0:4])), binary.BigEndian.Uint16(block[8:10])
		} else {
			ip, port = netip.AddrFrom16([16]byte(block[0:16])).Unmap(), binary.BigEndian.Uint16(block[32:34])
		}
		info.Claimed = netip.AddrPortFrom(ip, port).String()
	}
	tlvs := block[addrLen:]
	// proxyproto.SplitTLVs, keeping only the two types read, last one wins.
	var id, edge []byte
	var haveID, haveEdge bool
	for i := 0; i < len(tlvs); {
		if len(tlvs)-i <= 2 {
			return info, fmt.Errorf("proxy v2 tlvs: %w", proxyproto.ErrTruncatedTLV)
		}
		t, n := proxyproto.PP2Type(tlvs[i]), int(binary.BigEndian.Uint16(tlvs[i+1:i+3]))
		i += 3
		if i+n > len(tlvs) {
			return info, fmt.Errorf("proxy v2 tlvs: %w", proxyproto.ErrTruncatedTLV)
		}
		switch t {
		case proxyproto.PP2_TYPE_UNIQUE_ID:
			id, haveID = tlvs[i:i+n], true
		case TLVEdgeName:
			edge, haveEdge = tlvs[i:i+n], true
		}
		i += n
	}
	if haveID {
		info.ID = printable(id)
	}
	if haveEdge {
		info.Edge = edgeName(edge)
	}
	return info, nil
}

// lastEdge is the edge name parseV2 made a string of last: connections
// from one edge carry the same name, which then costs no allocation.
var lastEdge atomic.Pointer[string]

// edgeName is printable(b), reusing lastEdge's string when it is b.
func edgeName(b []byte) string {
	if p := lastEdge.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := printable(b)
	lastEdge.Store(&s)
	return s
}

// Info is what a header carries.
type Info struct {
	Header  string // HeaderV2, HeaderV1 or HeaderLocal
	Claimed string // the client's address and port; "" for LOCAL, UNKNOWN, UDP and Unix sources
	Edge    string // the TLVEdgeName TLV, printable or hex
	ID      string // the PP2_TYPE_UNIQUE_ID TLV, printable or hex
}

// interpret turns a parsed header into what it carries. A header
// whose TLVs do not parse is refused as a whole.
func interpret(h *proxyproto.Header) (Info, error) {
	info := Info{Header: HeaderV2}
	if h.Version == 1 {
		info.Header = HeaderV1
	}
	if h.Command.IsLocal() {
		info.Header = HeaderLocal
	} else if ap, ok := addrPort(h.SourceAddr); ok && h.TransportProtocol.IsStream() && !h.TransportProtocol.IsUnix() {
		info.Claimed = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	tlvs, err := h.TLVs()
	if err != nil {
		return info, fmt.Errorf("proxy v2 tlvs: %w", err)
	}
	for _, t := range tlvs {
		switch t.Type {
		case proxyproto.PP2_TYPE_UNIQUE_ID:
			info.ID = printable(t.Value)
		case TLVEdgeName: // what the edge writes
			info.Edge = printable(t.Value)
		}
	}
	return info, nil
}

// addrPort converts a socket address to netip form.
func addrPort(a net.Addr) (netip.AddrPort, bool) {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort(), true
	case nil:
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	return ap, err == nil
}

// printable returns b as text when it is printable UTF-8, else as hex, so a
// TLV never puts control characters into a log line.
func printable(b []byte) string {
	if !utf8.Valid(b) {
		return hex.EncodeToString(b)
	}
	for _, r := range string(b) {
		if r < 0x20 || r == 0x7f {
			return hex.EncodeToString(b)
		}
	}
	return string(b)
}

// readers pools the bufio.Readers parseHeader hands to go-proxyproto.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, BufSize) }}
