package testbed

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StartNofile runs bin with args like Start, under an RLIMIT_NOFILE of n
// (soft and hard: the Go runtime raises a soft limit to the hard one), set
// by sh's ulimit before it execs bin: the process is bin itself.
func StartNofile(t testing.TB, n int, bin string, args ...string) *Proc {
	t.Helper()
	sh := append([]string{"-c", `ulimit -n ` + strconv.Itoa(n) + ` && exec "$0" "$@"`, bin}, args...)
	return StartCmd(t, exec.Command("sh", sh...))
}

// Flood opens up to n connections to addr, each sending one byte, and
// keeps them open until the returned function closes them all: enough of
// them make a server with a low RLIMIT_NOFILE run out of descriptors.
func Flood(t testing.TB, addr string, n int) (closeAll func()) {
	t.Helper()
	var conns []net.Conn
	for range n {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			break // the backlog is full
		}
		c.Write([]byte{0x30})
		conns = append(conns, c)
	}
	return func() {
		for _, c := range conns {
			c.Close()
		}
	}
}

// WaitOutput waits until p's output contains every one of want.
func WaitOutput(t testing.TB, p *Proc, within time.Duration, want ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out, missing := p.Output(), ""
		for _, w := range want {
			if !strings.Contains(out, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output of %s after %v:\n%s", missing, p.Cmd.Path, within, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// OpenFDs is how many descriptors the process pid holds (0: this test
// process), counted in /proc; -1 when they cannot be read (the process
// has gone).
func OpenFDs(pid int) int {
	dir := "/proc/self/fd"
	if pid != 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/fd"
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	return len(ents)
}

// RefusesFIFO makes a FIFO called name in a directory of its own and
// checks that read, given its path, refuses it at once naming what it is
// (safefile.Read's message): a plain read would block for ever, as no
// one writes to it. It fails the test after 10 s of blocking.
func RefusesFIFO(t testing.TB, name string, read func(path string) error) {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- read(fifo) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "is a named pipe (FIFO), not a regular file") {
			t.Errorf("%s as a FIFO: %v, want it refused as a named pipe", name, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("reading %s blocked on a FIFO", name)
	}
}
