package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/ticketkeys"
)

// TestReadConfigFile: the origin's files (pins, ticket keys) are taken
// from regular files only, a symlink to one included, and up to a limit;
// a FIFO with no writer is refused at once (a blocking open would wait
// for a writer for ever), and so are a device (a symlink to /dev/zero),
// a directory and a file over the limit, each error naming the key and
// the path. A private file (the ticket keys) open to group or others is
// refused, naming its mode and chmod 600.
func TestReadConfigFile(t *testing.T) {
	dir := t.TempDir()
	good := testbed.WriteFile(t, dir, "good", "abc\n")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 200<<20); err != nil { // sparse: no 200 MB written
		t.Fatal(err)
	}
	open := testbed.WriteFile(t, dir, "open", "abc\n")
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path    string
		private bool
		want    string // the error; "" reads abc
	}{
		{good, true, ""},
		{link, true, ""},
		{open, false, ""},
		{fifo, false, "k: " + fifo + " is a named pipe (FIFO), not a regular file"},
		{zero, false, "k: " + zero + " is a character device, not a regular file"},
		{dir, false, "k: " + dir + " is a directory, not a regular file"},
		{big, false, "k: " + big + " is 209715200 bytes, more than 65536"},
		{open, true, "k: " + open + " has mode 0644, open to group or others: anyone who can read it can mint session tickets (chmod 600 it)"},
		{filepath.Join(dir, "none"), false, "k: open " + filepath.Join(dir, "none") + ": no such file or directory"},
	} {
		data, err := readConfigFile("k", tc.path, ticketkeys.MaxFile, tc.private)
		switch {
		case tc.want == "" && (err != nil || string(data) != "abc\n"):
			t.Errorf("%s: %q, %v", tc.path, data, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: error %v, want %s", tc.path, err, tc.want)
		}
	}
	// At the limit is fine, a byte more is not.
	at := testbed.WriteFile(t, dir, "at", strings.Repeat("#", 10))
	if _, err := readConfigFile("k", at, 10, false); err != nil {
		t.Errorf("a file of the limit: %v", err)
	}
	if _, err := readConfigFile("k", at, 9, false); err == nil || err.Error() != "k: "+at+" is 10 bytes, more than 9" {
		t.Errorf("a file a byte over the limit: %v", err)
	}
}

// TestReadConfigFileOwner: a private file owned by another user than the
// origin's, root aside, is refused, naming the owner (as root: the file
// is given to nobody's uid, then back to root).
func TestReadConfigFileOwner(t *testing.T) {
	testbed.NeedRoot(t)
	path := testbed.WriteFile(t, t.TempDir(), "keys", "abc\n")
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	want := "k: " + path + " is owned by uid 65534, neither the origin's user (uid 0) nor root (chown it, then chmod 600)"
	if _, err := readConfigFile("k", path, 100, true); err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
	if _, err := readConfigFile("k", path, 100, false); err != nil {
		t.Errorf("a file that need not be private: %v", err)
	}
	if err := os.Chown(path, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := readConfigFile("k", path, 100, true); err != nil {
		t.Errorf("owned by root: %v", err)
	}
}
