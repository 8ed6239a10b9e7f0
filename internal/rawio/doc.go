// Package rawio is read(2) and write(2) on a non-blocking socket without
// telling the Go scheduler a system call is under way: the event loops of
// internal/evloop and the LDAP core's sockets and output queue make every
// read and write of a non-blocking descriptor through it.
//
//	n, err := rawio.ReadNow(fd, buf) // syscall.EAGAIN: nothing to read yet
package rawio
