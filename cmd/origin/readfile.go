package main

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/edgefleet/edgefleet/internal/safefile"
)

// maxPinsFile bounds core.tls.pins: about 150000 agents' lines (a
// fingerprint with colons, 95 characters, and a name).
const maxPinsFile = 16 << 20

// readConfigFile reads the file at path, named by the configuration key
// key (core.tls.pins, core.tls.ticket_key_file), at start and on SIGHUP,
// as safefile.Read does (a regular file of at most limit bytes, opened
// without blocking). A private file (the ticket keys) must also be
// readable by its owner alone, and owned by the process's user or by
// root, as ssh wants of a private key.
func readConfigFile(key, path string, limit int64, private bool) ([]byte, error) {
	var check func(fs.FileInfo) error
	if private {
		check = checkPrivate
	}
	data, err := safefile.Read(path, limit, check)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
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
