package errclass

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
)

// LocalResources reports whether err is this host running out of a
// resource (file descriptors: EMFILE, ENFILE; buffer or kernel memory:
// ENOBUFS, ENOMEM; ephemeral ports: EADDRNOTAVAIL from connect; room in
// an epoll set: ENOSPC from epoll_ctl): a dial that failed so never left
// the host, and says nothing about the server it was meant for. Such a
// failure must not mark a server OFFLINE (only a connect failure, a
// failed check or an I/O failure the client could not have caused does).
//
// A name lookup's *net.DNSError keeps the resolver's own failure as text
// only ("dial udp 127.0.0.53:53: socket: too many open files"): that
// text is recognised too.
func LocalResources(err error) bool {
	for _, e := range localErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		for _, e := range localErrnos {
			if strings.Contains(de.Err, e.Error()) {
				return true
			}
		}
	}
	return false
}

var localErrnos = []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
	syscall.EADDRNOTAVAIL, syscall.ENOSPC}

// DescriptorShortage returns the error of a socket this process could
// not open now for lack of descriptors or memory (it tries one, closed at
// once), or nil. A name lookup that failed during such a shortage may
// have failed for that alone, whatever it says: a resolver that cannot
// open /etc/hosts or its socket answers "no such host" from what it could
// read.
func DescriptorShortage() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		if LocalResources(err) {
			return os.NewSyscallError("socket", err)
		}
		return nil
	}
	syscall.Close(fd)
	return nil
}

// Temporary reports accept errors that closing connections or waiting
// cures: every LocalResources error, a connection reset or aborted before
// it was accepted, a timeout.
func Temporary(err error) bool {
	if LocalResources(err) {
		return true
	}
	for _, e := range []error{syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR,
		syscall.EAGAIN, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
