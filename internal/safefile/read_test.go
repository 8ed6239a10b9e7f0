package safefile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadRefusesWhatIsNoFile: a FIFO (which would block a plain read
// for ever), a directory and a file over the limit are refused at once;
// a regular file and a symlink to one are read.
func TestReadRefusesWhatIsNoFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, 101), 0o600)
	ok := filepath.Join(dir, "ok.yaml")
	os.WriteFile(ok, []byte("a: 1\n"), 0o600)
	link := filepath.Join(dir, "link.yaml")
	os.Symlink(ok, link)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for path, want := range map[string]string{
			fifo: "is a named pipe (FIFO), not a regular file",
			dir:  "is a directory, not a regular file",
			big:  "is 101 bytes, more than 100",
		} {
			if _, err := Read(path, 100, nil); err == nil || !strings.HasSuffix(err.Error(), want) {
				t.Errorf("Read(%s) = %v, want …%s", filepath.Base(path), err, want)
			}
		}
		for _, path := range []string{ok, link} {
			if b, err := Read(path, 100, nil); err != nil || string(b) != "a: 1\n" {
				t.Errorf("Read(%s) = %q, %v", filepath.Base(path), b, err)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a hang guard: a blocking open of the FIFO
		t.Fatal("Read blocked")
	}
}

// TestOpenAndKeyPairRefuseFIFO: Open (the pushed edge binary) and
// X509KeyPair (certificate and key files) refuse a FIFO at once, as Read
// does; Open hands back a regular file.
func TestOpenAndKeyPairRefuseFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(fifo); err == nil || !strings.Contains(err.Error(), "is a named pipe (FIFO), not a regular file") {
		t.Errorf("Open of a FIFO: %v", err)
	}
	if _, err := X509KeyPair(fifo, fifo); err == nil || !strings.Contains(err.Error(), "is a named pipe (FIFO), not a regular file") {
		t.Errorf("X509KeyPair of a FIFO: %v", err)
	}
	ok := filepath.Join(dir, "edge")
	os.WriteFile(ok, []byte("binary"), 0o700)
	f, st, err := Open(ok)
	if err != nil || st.Size() != 6 {
		t.Fatalf("Open of a regular file: %v, %v", st, err)
	}
	f.Close()
}

// TestToken: a bearer token file is one word of at least MinToken
// characters, surrounding white space dropped; a short one, two words or
// a FIFO are refused.
func TestToken(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]string{
		"  0123456789abcdef\n":    "",
		"short\n":                 "the token must be at least 16 characters",
		"0123456789 abcdef0123\n": "the token must be one word on one line",
	} {
		p := filepath.Join(dir, "token")
		os.WriteFile(p, []byte(content), 0o600)
		tok, err := Token(p)
		switch {
		case want == "" && (err != nil || tok != "0123456789abcdef"):
			t.Errorf("%q: %q, %v", content, tok, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: %v, want %q", content, err, want)
		}
	}
}
