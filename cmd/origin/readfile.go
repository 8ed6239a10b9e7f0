package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// maxPinsFile bounds core.tls.pins: about 150000 agents' lines (a
// fingerprint with colons, 95 characters, and a name).
const maxPinsFile = 16 << 20

// readConfigFile reads the file at path, named by the configuration key
// key (core.tls.pins, core.tls.ticket_key_file), at start and on SIGHUP,
// without trusting what is there: it opens without blocking (a FIFO with no
// writer would hang the start, or the SIGHUP in the process's only signal
// loop, and SIGTERM with it), takes a regular file only (a symlink to one
// is fine; a FIFO, a device such as /dev/zero, a directory or a socket is
// refused) and reads at most limit bytes (a larger file is refused before
// it costs its size in memory). A private file (the ticket keys) must also
// be readable by its owner alone, and owned by the process's user or by
// root, as ssh wants of a private key.
func readConfigFile(key, path string, limit int64, private bool) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, &fs.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s is %s, not a regular file", key, path, fileKind(st.Mode()))
	}
	if private {
		if err := checkPrivate(st); err != nil {
			return nil, fmt.Errorf("%s: %s %w", key, path, err)
		}
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %s is %d bytes, more than %d", key, path, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1)) // it may grow while read
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %s is more than %d bytes", key, path, limit)
	}
	return data, nil
}

// checkPrivate refuses a file that others than its owner may read or
// write, or whose owner is neither this process's user nor root: whoever
// reads an origin pool's ticket keys can mint tickets (docs/origin-pool.md).
func checkPrivate(st fs.FileInfo) error {
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("has mode %04o, open to group or others: anyone who can read it can mint session tickets (chmod 600 it)", perm)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("has no owner to check")
	}
	if euid := os.Geteuid(); sys.Uid != 0 && int(sys.Uid) != euid {
		return fmt.Errorf("is owned by uid %d, neither the origin's user (uid %d) nor root (chown it, then chmod 600)", sys.Uid, euid)
	}
	return nil
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
