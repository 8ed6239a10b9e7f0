package core

import (
	"encoding/binary"
	"io"
	"net"
)

// maxRecord is the largest TLS plaintext record (2^14) and its header.
const maxRecord = 5 + 16384

// readHello reads the first TLS record of c, of which first (0x16) has
// been read already, and returns the bytes read (for crypto/tls to read
// again) and the session tickets the ClientHello offers. Only that first
// record is looked at: a ClientHello split over several records offers,
// as far as the queue knows, nothing, and waits as a full handshake.
func readHello(c net.Conn, first byte) (raw []byte, tickets [][]byte, err error) {
	hdr := make([]byte, 5, maxRecord)
	hdr[0] = first
	if _, err := io.ReadFull(c, hdr[1:]); err != nil {
		return hdr[:1], nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[3:5]))
	if n == 0 || n > maxRecord-5 {
		return hdr, nil, nil // not a hello crypto/tls will accept: it says why
	}
	raw = hdr[:5+n]
	if _, err := io.ReadFull(c, raw[5:]); err != nil {
		return hdr, nil, err
	}
	return raw, helloTickets(raw[5:]), nil
}

// helloTickets parses just enough of a ClientHello (the body of a
// handshake record) to find the session tickets it offers: the
// session_ticket extension's (TLS 1.2) and the pre_shared_key identities
// (TLS 1.3). Anything malformed offers nothing; crypto/tls judges the
// hello itself.
func helloTickets(b []byte) [][]byte {
	// Handshake header: type 1 (client_hello), 3-byte length.
	if len(b) < 4 || b[0] != 1 {
		return nil
	}
	b = b[4:]
	// legacy_version (2), random (32), session_id (1+n),
	// cipher_suites (2+n), compression_methods (1+n), extensions (2+n).
	if len(b) < 34 {
		return nil
	}
	b = b[34:]
	var ok bool
	if b, ok = skip(b, 1); !ok {
		return nil
	}
	if b, ok = skip(b, 2); !ok {
		return nil
	}
	if b, ok = skip(b, 1); !ok {
		return nil
	}
	exts, ok := vec(b, 2)
	if !ok {
		return nil
	}
	var tickets [][]byte
	for len(exts) >= 4 {
		typ := binary.BigEndian.Uint16(exts)
		data, ok := vec(exts[2:], 2)
		if !ok {
			return tickets
		}
		exts = exts[4+len(data):]
		switch typ {
		case 35: // session_ticket
			if len(data) > 0 {
				tickets = append(tickets, data)
			}
		case 41: // pre_shared_key: identities<7..2^16-1>, each identity<1..2^16-1> and a 4-byte age
			ids, ok := vec(data, 2)
			for ok && len(ids) >= 2 {
				var id []byte
				if id, ok = vec(ids, 2); ok && len(ids) >= 2+len(id)+4 {
					tickets = append(tickets, id)
					ids = ids[2+len(id)+4:]
				} else {
					ok = false
				}
			}
		}
	}
	return tickets
}

// vec is the body of the vector at the start of b whose length takes n
// bytes (1 or 2).
func vec(b []byte, n int) ([]byte, bool) {
	if len(b) < n {
		return nil, false
	}
	l := int(b[0])
	if n == 2 {
		l = int(binary.BigEndian.Uint16(b))
	}
	if len(b) < n+l {
		return nil, false
	}
	return b[n : n+l], true
}

// skip drops the vector at the start of b whose length takes n bytes.
func skip(b []byte, n int) ([]byte, bool) {
	v, ok := vec(b, n)
	if !ok {
		return nil, false
	}
	return b[n+len(v):], true
}
