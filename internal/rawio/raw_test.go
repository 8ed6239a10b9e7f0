package rawio

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadWriteNow: on a non-blocking socket pair, a read with nothing
// there is EAGAIN (it never waits), what is written is read back, an
// empty buffer is (0, nil) without a system call, and EOF is (0, nil).
func TestReadWriteNow(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	buf := make([]byte, 16)
	if n, err := ReadNow(fds[0], buf); n != -1 || err != syscall.EAGAIN {
		t.Fatalf("ReadNow on an empty socket = %d, %v; want -1, EAGAIN", n, err)
	}
	if n, err := WriteNow(fds[1], []byte("hello")); n != 5 || err != nil {
		t.Fatalf("WriteNow = %d, %v; want 5, nil", n, err)
	}
	if n, err := WriteNow(fds[1], nil); n != 0 || err != nil {
		t.Fatalf("WriteNow(nil) = %d, %v; want 0, nil", n, err)
	}
	if n, err := ReadNow(fds[0], buf); n != 5 || err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("ReadNow = %d, %v, %q; want 5, nil, hello", n, err, buf[:max(n, 0)])
	}
	if n, err := ReadNow(fds[0], nil); n != 0 || err != nil {
		t.Fatalf("ReadNow(nil) = %d, %v; want 0, nil", n, err)
	}
	unix.Close(fds[1])
	if n, err := ReadNow(fds[0], buf); n != 0 || err != nil {
		t.Fatalf("ReadNow after the peer closed = %d, %v; want 0, nil (EOF)", n, err)
	}
	if n, err := ReadNow(-1, buf); n != -1 || err != syscall.EBADF {
		t.Fatalf("ReadNow(-1) = %d, %v; want -1, EBADF", n, err)
	}
}
