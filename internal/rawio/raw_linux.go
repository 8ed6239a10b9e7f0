package rawio

import (
	"syscall"
	"unsafe"
)

// ReadNow and WriteNow are read(2) and write(2) on a non-blocking socket
// without telling the Go scheduler that a system call is under way
// (syscall.RawSyscall). On a non-blocking socket neither waits, so there
// is nothing to hand the P over for; announcing each one (entersyscall,
// exitsyscall) cost instructions, and a call that the kernel kept a
// while (a loopback write runs the receiver's TCP processing too) made
// sysmon hand the P to another thread, waking it, and the caller find a
// P again afterwards. Only for file descriptors in non-blocking mode.
func ReadNow(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e // an Errno below 256 boxes without allocating
	}
	return int(n), nil
}

// WriteNow: see ReadNow.
func WriteNow(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}
