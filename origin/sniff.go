package origin

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"unicode/utf8"

	"github.com/edgefleet/edgefleet/relay"
	proxyproto "github.com/pires/go-proxyproto"
)

// MaxV2Length is the largest value of a v2 header's length field (address
// block plus TLVs) the front accepts; a longer header is refused as soon as
// its 16-byte prefix has arrived, without waiting for or buffering the rest.
// Our edge sends well under 200 bytes; 4 KiB leaves room for the SSL TLVs
// HAProxy can add.
const MaxV2Length = 4096

const (
	v2PrefixLen = 16  // signature, version/command, family, length
	maxV1Len    = 107 // the longest v1 line the spec allows, CRLF included
	// readerSize holds the longest v2 header in one buffer.
	readerSize = v2PrefixLen + MaxV2Length
)

var (
	sigV1 = []byte("PROXY ")
	sigV2 = proxyproto.SIGV2
)

// kind is what the first bytes of a connection turned out to be.
type kind int

const (
	kindNone kind = iota // not a PROXY header: forward unchanged
	kindV1
	kindV2
)

func (k kind) String() string {
	return [...]string{HeaderNone, HeaderV1, HeaderV2}[k]
}

var (
	// errEmpty: the connection ended before its first byte.
	errEmpty = errors.New("closed before the first byte")
	// errOversized: a v2 length field above MaxV2Length.
	errOversized = fmt.Errorf("proxy v2 header longer than %d bytes", MaxV2Length)
	errV1TooLong = fmt.Errorf("proxy v1 line longer than %d bytes", maxV1Len)
)

// sniff peeks at the first bytes of r, consuming none, and tells whether
// they start a PROXY header. It decides as soon as the bytes seen so far
// rule out both signatures, so a client that sends one byte of something
// else and waits for an answer is forwarded at once. A connection that
// ends partway through a signature is forwarded as it came: only a whole
// signature makes a header.
func sniff(r *bufio.Reader) (kind, error) {
	n := 1
	for {
		b, err := r.Peek(n)
		if len(b) == 0 {
			if err == io.EOF {
				return kindNone, errEmpty
			}
			return kindNone, err
		}
		switch {
		case bytes.HasPrefix(b, sigV2):
			return kindV2, nil
		case bytes.HasPrefix(b, sigV1):
			return kindV1, nil
		case !bytes.HasPrefix(sigV2, b) && !bytes.HasPrefix(sigV1, b):
			return kindNone, nil
		case err != nil:
			if err == io.EOF {
				return kindNone, nil
			}
			return kindNone, err
		}
		// A proper prefix of a signature: look at what else has arrived,
		// waiting for at least one more byte.
		n = max(len(b)+1, r.Buffered())
	}
}

// readHeader makes sure the whole header of kind k is buffered in r, within
// the size bounds, then consumes and parses it.
func readHeader(r *bufio.Reader, k kind) (*proxyproto.Header, error) {
	switch k {
	case kindV2:
		b, err := r.Peek(v2PrefixLen)
		if err != nil {
			return nil, truncated(err)
		}
		length := int(binary.BigEndian.Uint16(b[14:16]))
		if length > MaxV2Length {
			return nil, errOversized
		}
		if _, err := r.Peek(v2PrefixLen + length); err != nil {
			return nil, truncated(err)
		}
	case kindV1:
		for n := len(sigV1); ; n = max(n+1, r.Buffered()) {
			b, err := r.Peek(min(n, maxV1Len))
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				break
			}
			if len(b) >= maxV1Len {
				return nil, errV1TooLong
			}
			if err != nil {
				return nil, truncated(err)
			}
		}
	default:
		return nil, nil
	}
	h, err := proxyproto.Read(r)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func truncated(err error) error {
	if err == io.EOF {
		return fmt.Errorf("truncated proxy header: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// headerInfo is what a parsed header contributes to a Peer.
type headerInfo struct {
	header  string // v2, v1, local
	claimed string
	edge    string
	id      string
}

// interpret turns a parsed header into the Peer fields it carries. A header
// whose TLVs do not parse is refused as a whole.
func interpret(h *proxyproto.Header) (headerInfo, error) {
	info := headerInfo{header: HeaderV2}
	if h.Version == 1 {
		info.header = HeaderV1
	}
	if h.Command.IsLocal() {
		info.header = HeaderLocal
	} else if ap, ok := addrPort(h.SourceAddr); ok && h.TransportProtocol.IsStream() && !h.TransportProtocol.IsUnix() {
		info.claimed = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	tlvs, err := h.TLVs()
	if err != nil {
		return info, fmt.Errorf("proxy v2 tlvs: %w", err)
	}
	for _, t := range tlvs {
		switch t.Type {
		case proxyproto.PP2_TYPE_UNIQUE_ID:
			info.id = printable(t.Value)
		case relay.TLVEdgeName: // what the edge writes
			info.edge = printable(t.Value)
		}
	}
	return info, nil
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

// pending copies out what r has buffered: bytes read from the socket but
// not consumed, which must reach the inner service first.
func pending(r *bufio.Reader) []byte {
	n := r.Buffered()
	if n == 0 {
		return nil
	}
	b, _ := r.Peek(n)
	return bytes.Clone(b)
}

// readers pools the header-phase buffers: a connection holds one only
// until its header is read.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readerSize) }}

func getReader(c net.Conn) *bufio.Reader {
	r := readers.Get().(*bufio.Reader)
	r.Reset(c)
	return r
}

func putReader(r *bufio.Reader) {
	r.Reset(nil)
	readers.Put(r)
}
