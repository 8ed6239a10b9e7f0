package ticketkeys

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

func key(b byte) [32]byte { return [32]byte(bytes.Repeat([]byte{b}, 32)) }

// TestRotateOrder: an appended key decrypts at once and encrypts from the
// next rotation on; keep bounds the file.
func TestRotateOrder(t *testing.T) {
	k := Keys{key(1)}
	if got := k.ForTLS(); len(got) != 1 || got[0] != key(1) {
		t.Fatalf("one key: %v", got)
	}
	k = k.Rotate(key(2), 3)
	if got := k.ForTLS(); len(got) != 2 || got[0] != key(1) || got[1] != key(2) {
		t.Fatalf("after one rotation the old key still encrypts, the new one decrypts: %v", got)
	}
	k = k.Rotate(key(3), 3).Rotate(key(4), 3)
	if len(k) != 3 || k[0] != key(2) || k[2] != key(4) {
		t.Fatalf("keep 3: %v", k)
	}
	if got := k.ForTLS(); got[0] != key(3) || got[1] != key(4) || got[2] != key(2) {
		t.Fatalf("the next-to-last encrypts, then newest first: %v", got)
	}
	if back, err := Parse(k.Format()); err != nil || len(back) != 3 || back[1] != k[1] {
		t.Fatalf("Format then Parse: %v, %v", back, err)
	}
}

// TestParseErrors: each broken file is refused with the line it breaks on.
func TestParseErrors(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	short := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 16))
	for _, c := range []struct{ file, want string }{
		{"", "ticket key file: no key"},
		{"# only a comment\n\n", "ticket key file: no key"},
		{good + "\nnot base64!\n", "ticket key file line 2: not 32 bytes in base64 (openssl rand -base64 32)"},
		{short + "\n", "ticket key file line 1: not 32 bytes in base64 (openssl rand -base64 32)"},
		{good + "\n# c\n" + good + "\n", "ticket key file line 3: the key of line 1 again"},
		{strings.Repeat("#", MaxFile+1), "ticket key file: 65537 bytes, more than 65536"},
	} {
		if _, err := Parse([]byte(c.file)); err == nil || err.Error() != c.want {
			t.Errorf("Parse(%.40q) = %v, want %q", c.file, err, c.want)
		}
	}
	var many strings.Builder
	for i := range MaxKeys + 1 {
		b := New()
		b[0] = byte(i)
		many.WriteString(base64.StdEncoding.EncodeToString(b[:]) + "\n")
	}
	if _, err := Parse([]byte(many.String())); err == nil || err.Error() != "ticket key file: more than 256 keys" {
		t.Errorf("257 keys: %v", err)
	}
}

// FuzzParse: no input panics, and what parses formats back to the same keys.
func FuzzParse(f *testing.F) {
	f.Add([]byte(Keys{key(1), key(2)}.Format()))
	f.Add([]byte("#\n\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		k, err := Parse(raw)
		if err != nil {
			return
		}
		back, err := Parse(k.Format())
		if err != nil || len(back) != len(k) {
			t.Fatalf("round trip: %v (%d keys, want %d)", err, len(back), len(k))
		}
		for i := range k {
			if back[i] != k[i] {
				t.Fatalf("key %d changed in the round trip", i)
			}
		}
	})
}
