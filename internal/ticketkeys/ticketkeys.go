// Package ticketkeys reads and writes the TLS session ticket key file that
// the origin hosts of a pool share, so that an agent resumes its session
// on any of them (docs/origin-pool.md).
//
// The file is one key a line, each 32 random bytes in standard base64
// (`openssl rand -base64 32`), oldest first; blank lines and lines
// starting with # are ignored. As with HAProxy's tls-ticket-keys, a key is
// rotated in by appending it: the next-to-last key encrypts new tickets
// (the only key, when there is one), and every key decrypts. So a key
// written to every host of the pool decrypts there before any host
// encrypts with it, and a host that reloads later than another still
// resumes the other's tickets. Whoever reads the file can mint tickets:
// the origin takes it only private (mode 0600 or stricter, owned by its
// user or root) and at most MaxFile bytes.
//
//	keys, err := ticketkeys.Parse(raw)
//	tlsConfig.SetSessionTicketKeys(keys.ForTLS())
//	next := keys.Rotate(ticketkeys.New(), 25)
package ticketkeys

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
)

// MaxKeys bounds the keys of one file (a day of hourly keys is 25).
const MaxKeys = 256

// MaxFile bounds the file's size: MaxKeys lines of 44 characters, and
// room for comments. A reader should read no more than MaxFile+1 bytes.
const MaxFile = 64 << 10

// Keys are a file's keys, oldest first.
type Keys [][32]byte

// New is a fresh random key.
func New() [32]byte {
	var k [32]byte
	rand.Read(k[:]) // never fails (crypto/rand)
	return k
}

// Parse reads a key file. It fails, naming the line, on a line that is
// not 32 bytes of base64, a key given twice, no key at all or more than
// MaxKeys.
func Parse(raw []byte) (Keys, error) {
	if len(raw) > MaxFile {
		return nil, fmt.Errorf("ticket key file: %d bytes, more than %d", len(raw), MaxFile)
	}
	var keys Keys
	seen := map[[32]byte]int{}
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(line)
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("ticket key file line %d: not 32 bytes in base64 (openssl rand -base64 32)", i+1)
		}
		k := [32]byte(b)
		if at, ok := seen[k]; ok {
			return nil, fmt.Errorf("ticket key file line %d: the key of line %d again", i+1, at)
		}
		seen[k] = i + 1
		if keys = append(keys, k); len(keys) > MaxKeys {
			return nil, fmt.Errorf("ticket key file: more than %d keys", MaxKeys)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("ticket key file: no key")
	}
	return keys, nil
}

// Format writes keys as Parse reads them.
func (k Keys) Format() []byte {
	var b bytes.Buffer
	b.WriteString("# edgefleet TLS session ticket keys, oldest first: the next-to-last encrypts, all decrypt\n")
	for _, key := range k {
		b.WriteString(base64.StdEncoding.EncodeToString(key[:]))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Rotate appends key and keeps the newest keep keys (at least two: the
// one that encrypts from now on, and the one just added).
func (k Keys) Rotate(key [32]byte, keep int) Keys {
	keep = min(max(keep, 2), MaxKeys)
	next := append(append(Keys{}, k...), key)
	return next[max(len(next)-keep, 0):]
}

// ForTLS is the keys in the order tls.Config.SetSessionTicketKeys wants:
// the key that encrypts first, then the others, newest first.
func (k Keys) ForTLS() [][32]byte {
	if len(k) == 0 {
		return nil
	}
	enc := max(len(k)-2, 0)
	out := [][32]byte{k[enc]}
	for i := len(k) - 1; i >= 0; i-- {
		if i != enc {
			out = append(out, k[i])
		}
	}
	return out
}
