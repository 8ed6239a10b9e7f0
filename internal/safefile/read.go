// Package safefile reads the files a binary is told to read (its
// configuration, the state file, key files) without trusting what is
// there: a regular file only, opened without blocking, bounded in size.
//
//	data, err := safefile.Read(path, safefile.MaxConfig, nil)
package safefile

import (
	"crypto/tls"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// MaxConfig bounds a configuration file (fleet.yaml, edge.yaml,
// origin.yaml) and the state file: far more than any real one.
const MaxConfig = 4 << 20

// Read reads a file a binary is told to read, at start and on SIGHUP,
// without trusting what is there: it opens without blocking (a FIFO with
// no writer would hang the start, or a SIGHUP in the process's only signal
// loop, and SIGTERM with it), takes a regular file only (a symlink to one
// is fine; a FIFO, a device such as /dev/zero, a directory or a socket is
// refused), lets check (may be nil) refuse it by its metadata, and reads
// at most limit bytes (a larger file is refused before it costs its size
// in memory).
func Read(path string, limit int64, check func(fs.FileInfo) error) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if check != nil {
		if err := check(st); err != nil {
			return nil, fmt.Errorf("%s %w", path, err)
		}
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", path, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1)) // it may grow while read
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is more than %d bytes", path, limit)
	}
	return data, nil
}

// Open opens a regular file as Read does (without blocking; a FIFO, a
// device, a directory or a socket refused, naming what it is), for a
// file too large to hold in memory at once (the edge binary fleet
// pushes). The caller closes it.
func Open(path string) (*os.File, fs.FileInfo, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is %s, not a regular file", path, fileKind(st.Mode()))
	}
	return f, st, nil
}

// MaxPEM bounds a PEM file: a certificate chain, a key, a CA bundle.
const MaxPEM = 4 << 20

// X509KeyPair is tls.LoadX509KeyPair with both files read by Read.
func X509KeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := Read(certFile, MaxPEM, nil)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := Read(keyFile, MaxPEM, nil)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(cert, key)
}

// MinToken is the shortest bearer token Token accepts: a guessable one
// protects nothing.
const MinToken = 16

// Token reads a bearer token file (the edge's metrics_token_file, which
// fleet reads too): one word on one line of at least MinToken
// characters, surrounding white space dropped.
func Token(path string) (string, error) {
	b, err := Read(path, 4<<10, nil)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case len(tok) < MinToken:
		return "", fmt.Errorf("%s: the token must be at least %d characters", path, MinToken)
	case strings.ContainsAny(tok, " \t\r\n"):
		return "", fmt.Errorf("%s: the token must be one word on one line", path)
	}
	return tok, nil
}

// fileKind names the type of a file that is not a regular one.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "of type " + m.Type().String()
}
