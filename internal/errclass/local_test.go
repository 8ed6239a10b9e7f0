package errclass

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
)

func TestLocalResources(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}, true},
		{fmt.Errorf("dial origin: %w", syscall.ENFILE), true},
		{syscall.ENOBUFS, true},
		{syscall.ENOMEM, true},
		{os.NewSyscallError("connect", syscall.EADDRNOTAVAIL), true}, // no ephemeral port left
		{os.NewSyscallError("epoll_ctl", syscall.ENOSPC), true},      // max_user_watches
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false},
		{syscall.ETIMEDOUT, false},
		// The resolver keeps its socket's failure as text only.
		{fmt.Errorf("dial origin o1: %w", &net.DNSError{Err: "dial udp 127.0.0.53:53: socket: too many open files", Name: "origin.example.net", Server: "127.0.0.53:53"}), true},
		{&net.DNSError{Err: "dial udp 127.0.0.53:53: socket: no buffer space available", Name: "origin.example.net"}, true},
		{&net.DNSError{Err: "no such host", Name: "origin.example.net", IsNotFound: true}, false},
		{&net.DNSError{Err: "server misbehaving", Name: "origin.example.net", IsTemporary: true}, false},
		{nil, false},
	} {
		if got := LocalResources(tc.err); got != tc.want {
			t.Errorf("LocalResources(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
