// Package clienthello decides, on a connection's first bytes, whether they
// are a well-formed TLS ClientHello, and reads its server name (SNI)
// without decrypting anything: the edge's TLS gate (docs/edge.md). It
// only reads the record layer and the ClientHello, which travel in clear.
//
//	switch err := clienthello.Check(first, []string{"ldap.example.com"}); {
//	case err == nil:                              // a ClientHello for a listed name: dial
//	case errors.Is(err, clienthello.ErrMore):     // a valid prefix: read on
//	case errors.Is(err, clienthello.ErrWrongSNI): // well-formed, but not for us
//	default:                                      // ErrNotTLS: anything else
//	}
//
// The whole ClientHello, with the headers of the records that carry it,
// must fit in MaxLen (16389) bytes, the edge's first read at most: a
// longer one is refused (ErrNotTLS), even a valid one. Today's clients
// send 200 to 1,800 bytes (a post-quantum key share included); a hello
// resuming a session whose ticket carries a large client certificate
// chain takes up to about 5 KB.
package clienthello

import (
	"errors"
	"fmt"
)

// MaxLen is the most bytes a ClientHello may take, record headers
// included: what the edge reads before it decides (evloop.MaxFirst, one
// whole TLS record of 2^14 bytes and its header).
const MaxLen = 16384 + 5

// Errors of Check. A refusal wraps ErrNotTLS or ErrWrongSNI with what was
// wrong; ErrMore is returned as is.
var (
	// ErrMore: the bytes are a valid prefix of a ClientHello; more are
	// needed to decide.
	ErrMore = errors.New("clienthello: more bytes needed")
	// ErrNotTLS: the bytes are not (the start of) a well-formed TLS
	// ClientHello that fits in MaxLen: another protocol (LDAP, a PROXY
	// header, HTTP), an SSLv2-style hello, a malformed one, or garbage.
	ErrNotTLS = errors.New("not a TLS ClientHello")
	// ErrWrongSNI: a well-formed ClientHello whose server name is missing
	// or not among the names Check was given.
	ErrWrongSNI = errors.New("server name not served")
)

// Wire constants (RFC 8446, RFC 6066).
const (
	recordHeader     = 5     // type, version, length
	maxRecord        = 16384 // 2^14, a record's most plaintext
	typeHandshake    = 22
	typeClientHello  = 1
	handshakeHeader  = 4 // type, 24-bit length
	extServerName    = 0
	nameTypeHostName = 0
	// minHello is the shortest ClientHello body: version, random, an
	// empty session id, one cipher suite, one compression method.
	minHello     = 2 + 32 + 1 + 2 + 2 + 1 + 1
	maxSessionID = 32
)

var errTooLarge = fmt.Errorf("%w: ClientHello larger than %d bytes", ErrNotTLS, MaxLen)

// Check reports whether b starts with a well-formed TLS ClientHello (in
// one record or several) and, when names is not empty, whether its server
// name is one of names (compared without regard to ASCII case; a name in
// names has no trailing dot, as the SNI never has). It returns nil, ErrMore
// while b is a prefix that could still become one, or an error wrapping
// ErrNotTLS or ErrWrongSNI. Bytes after the ClientHello's last record are
// not looked at: once nil, the verdict stays nil whatever follows. Once
// b holds MaxLen bytes Check never says ErrMore. A prefix is refused as
// soon as its bytes allow: the record and handshake headers, the client
// version, the session id, cipher suite and compression method lists,
// the extensions block's length against the handshake's, and each
// extension's header against the block.
func Check(b []byte, names []string) error {
	msg, err := handshake(b)
	if err != nil {
		return err
	}
	host, err := parseHello(msg[handshakeHeader:])
	if err != nil || len(names) == 0 {
		return err
	}
	if host == nil {
		return fmt.Errorf("%w: the ClientHello has no server name (SNI)", ErrWrongSNI)
	}
	for _, n := range names {
		if equalFold(host, n) {
			return nil
		}
	}
	const show = 64 // the client chose it: keep what is logged short
	if len(host) > show {
		host = host[:show]
	}
	return fmt.Errorf("%w: %q is not among the server names", ErrWrongSNI, host)
}

// handshake returns the ClientHello handshake message (header and body)
// from the records at the start of b, joined when it spans several.
func handshake(b []byte) ([]byte, error) {
	var msg []byte
	declared := 0 // handshake bytes the records so far declare
	want, werr := 0, ErrMore
	// more is the verdict on a prefix: ErrMore, unless what there is of
	// the ClientHello is already wrong.
	more := func() error {
		if werr != nil {
			return ErrMore
		}
		return prefix(msg[handshakeHeader:], want-handshakeHeader)
	}
	for off := 0; ; {
		if off+recordHeader >= MaxLen { // no room left for another record
			return nil, errTooLarge
		}
		n, err := record(b[off:])
		if err == ErrMore {
			return nil, more()
		}
		if err != nil {
			return nil, err
		}
		end := off + recordHeader + n
		if end > MaxLen {
			return nil, errTooLarge
		}
		frag := b[off+recordHeader : min(len(b), end)]
		if off == 0 {
			msg = frag[:len(frag):len(frag)] // a later append copies, never writes into b
		} else {
			msg = append(msg, frag...)
		}
		declared += n
		want, werr = messageLen(msg)
		switch {
		case werr == ErrMore: // the handshake header is not all there yet
		case werr != nil:
			return nil, werr
		case declared > want:
			return nil, fmt.Errorf("%w: the record holds %d bytes more than the ClientHello", ErrNotTLS, declared-want)
		}
		if len(b) < end {
			return nil, more()
		}
		if werr == nil && declared == want {
			return msg, nil
		}
		off = end
	}
}

// prefix checks the start of a ClientHello body, p, of the n bytes its
// header declares, as far as p goes: the same checks as parseHello's up
// to the extensions' headers, so that a hello wrong in its first bytes is
// refused at once, not after n bytes. It returns ErrMore or an error
// wrapping ErrNotTLS.
func prefix(p []byte, n int) error {
	if len(p) >= 1 && p[0] != 3 || len(p) >= 2 && p[1] > 4 {
		return fmt.Errorf("%w: client version %#x outside 0x0300-0x0304", ErrNotTLS, p[:min(len(p), 2)])
	}
	off := 2 + 32 // version, random
	if len(p) <= off {
		return ErrMore
	}
	sid := int(p[off])
	if sid > maxSessionID || off+1+sid > n {
		return fmt.Errorf("%w: bad session id", ErrNotTLS)
	}
	off += 1 + sid
	if len(p) < off+2 {
		return ErrMore
	}
	suites := int(p[off])<<8 | int(p[off+1])
	if suites < 2 || suites%2 != 0 || off+2+suites > n {
		return fmt.Errorf("%w: bad cipher suite list", ErrNotTLS)
	}
	off += 2 + suites
	if len(p) <= off {
		return ErrMore
	}
	comp := int(p[off])
	if comp < 1 || off+1+comp > n {
		return fmt.Errorf("%w: bad compression method list", ErrNotTLS)
	}
	off += 1 + comp
	if off == n {
		return ErrMore // no extensions
	}
	if n-off < 2 {
		return fmt.Errorf("%w: the extensions' length does not match the ClientHello's", ErrNotTLS)
	}
	if len(p) < off+2 {
		return ErrMore
	}
	if l := int(p[off])<<8 | int(p[off+1]); off+2+l != n {
		return fmt.Errorf("%w: the extensions' length does not match the ClientHello's", ErrNotTLS)
	}
	for off += 2; off < n; {
		if n-off < 4 {
			return fmt.Errorf("%w: a truncated extension", ErrNotTLS)
		}
		if len(p) < off+4 {
			return ErrMore
		}
		l := int(p[off+2])<<8 | int(p[off+3])
		if off+4+l > n {
			return fmt.Errorf("%w: extension %d overruns the block", ErrNotTLS, int(p[off])<<8|int(p[off+1]))
		}
		off += 4 + l
	}
	return ErrMore
}

// record checks the record header at the start of b, as much of it as
// there is, and returns the record's length.
func record(b []byte) (int, error) {
	switch {
	case len(b) >= 1 && b[0]&0x80 != 0:
		return 0, fmt.Errorf("%w: an SSLv2-style record header (first byte %#02x)", ErrNotTLS, b[0])
	case len(b) >= 1 && b[0] != typeHandshake:
		return 0, fmt.Errorf("%w: record type %d, not handshake (22)", ErrNotTLS, b[0])
	case len(b) >= 2 && b[1] != 3:
		return 0, fmt.Errorf("%w: record version major %d, not 3 (0x0300-0x0304)", ErrNotTLS, b[1])
	case len(b) >= 3 && b[2] > 4:
		return 0, fmt.Errorf("%w: record version 0x03%02x outside 0x0300-0x0304", ErrNotTLS, b[2])
	case len(b) < recordHeader:
		return 0, ErrMore
	}
	n := int(b[3])<<8 | int(b[4])
	if n == 0 || n > maxRecord {
		return 0, fmt.Errorf("%w: record length %d outside 1-%d", ErrNotTLS, n, maxRecord)
	}
	return n, nil
}

// messageLen checks the handshake header at the start of msg, as much of
// it as there is, and returns the message's length, header included.
func messageLen(msg []byte) (int, error) {
	if len(msg) >= 1 && msg[0] != typeClientHello {
		return 0, fmt.Errorf("%w: handshake type %d, not ClientHello (1)", ErrNotTLS, msg[0])
	}
	if len(msg) < handshakeHeader {
		return 0, ErrMore
	}
	n := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
	switch {
	case n < minHello:
		return 0, fmt.Errorf("%w: ClientHello length %d, shorter than the least one (%d)", ErrNotTLS, n, minHello)
	case recordHeader+handshakeHeader+n > MaxLen:
		return 0, errTooLarge
	}
	return handshakeHeader + n, nil
}

// parseHello checks a ClientHello body and returns its host name (nil
// when it has none).
func parseHello(p []byte) ([]byte, error) {
	if p[0] != 3 || p[1] > 4 {
		return nil, fmt.Errorf("%w: client version %#02x%02x outside 0x0300-0x0304", ErrNotTLS, p[0], p[1])
	}
	p = p[2+32:] // version, random
	sid, p, ok := vec8(p)
	if !ok || len(sid) > maxSessionID {
		return nil, fmt.Errorf("%w: bad session id", ErrNotTLS)
	}
	suites, p, ok := vec16(p)
	if !ok || len(suites) < 2 || len(suites)%2 != 0 {
		return nil, fmt.Errorf("%w: bad cipher suite list", ErrNotTLS)
	}
	comp, p, ok := vec8(p)
	if !ok || len(comp) < 1 {
		return nil, fmt.Errorf("%w: bad compression method list", ErrNotTLS)
	}
	if len(p) == 0 {
		return nil, nil // no extensions (SSL 3.0, old TLS 1.0 clients)
	}
	exts, rest, ok := vec16(p)
	if !ok || len(rest) != 0 {
		return nil, fmt.Errorf("%w: the extensions' length does not match the ClientHello's", ErrNotTLS)
	}
	return extensions(exts)
}

// extensions walks the extension block and returns the host name of its
// server_name extension (nil when there is none).
func extensions(p []byte) ([]byte, error) {
	var host []byte
	seen := false
	for len(p) > 0 {
		if len(p) < 2 {
			return nil, fmt.Errorf("%w: a truncated extension", ErrNotTLS)
		}
		typ := int(p[0])<<8 | int(p[1])
		data, rest, ok := vec16(p[2:])
		if !ok {
			return nil, fmt.Errorf("%w: extension %d overruns the block", ErrNotTLS, typ)
		}
		p = rest
		if typ != extServerName {
			continue
		}
		if seen { // two answers to "which name": the origin would see the other one
			return nil, fmt.Errorf("%w: two server_name extensions", ErrNotTLS)
		}
		seen = true
		var err error
		if host, err = serverName(data); err != nil {
			return nil, err
		}
	}
	return host, nil
}

// serverName reads a server_name extension (RFC 6066 section 3) and
// returns its host_name.
func serverName(p []byte) ([]byte, error) {
	list, rest, ok := vec16(p)
	if !ok || len(rest) != 0 || len(list) == 0 {
		return nil, fmt.Errorf("%w: bad server_name list", ErrNotTLS)
	}
	var host []byte
	for len(list) > 0 {
		typ := list[0]
		name, r, ok := vec16(list[1:])
		if !ok || len(name) == 0 {
			return nil, fmt.Errorf("%w: bad server_name entry", ErrNotTLS)
		}
		list = r
		if typ != nameTypeHostName {
			continue
		}
		if host != nil {
			return nil, fmt.Errorf("%w: two host names in server_name", ErrNotTLS)
		}
		if err := checkHost(name); err != nil {
			return nil, err
		}
		host = name
	}
	return host, nil
}

// checkHost accepts what RFC 6066 allows in a host_name: ASCII, no
// trailing dot (Go's crypto/tls refuses one too).
func checkHost(name []byte) error {
	for _, c := range name {
		if c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: the server name holds byte %#02x (not printable ASCII)", ErrNotTLS, c)
		}
	}
	if name[len(name)-1] == '.' {
		return fmt.Errorf("%w: the server name ends with a dot", ErrNotTLS)
	}
	return nil
}

// vec8 splits off a vector with a one-byte length.
func vec8(p []byte) (v, rest []byte, ok bool) {
	if len(p) < 1 || len(p)-1 < int(p[0]) {
		return nil, nil, false
	}
	n := 1 + int(p[0])
	return p[1:n], p[n:], true
}

// vec16 splits off a vector with a two-byte length.
func vec16(p []byte) (v, rest []byte, ok bool) {
	if len(p) < 2 {
		return nil, nil, false
	}
	n := 2 + (int(p[0])<<8 | int(p[1]))
	if len(p) < n {
		return nil, nil, false
	}
	return p[2:n], p[n:], true
}

// equalFold compares a host name with a listed name, ASCII case folded,
// without allocating.
func equalFold(host []byte, name string) bool {
	if len(host) != len(name) {
		return false
	}
	for i := range host {
		if lower(host[i]) != lower(name[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
