package evloop

import (
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The loops make their non-blocking system calls with syscall.RawSyscall:
// none of them waits (every socket is non-blocking), so there is nothing
// to hand the P over for, and announcing each call to the scheduler
// (entersyscall, exitsyscall) cost instructions and, for a loopback write
// that runs the receiver's TCP processing too, a P handed to another
// thread. Only epoll_wait, which does wait, goes through the scheduler.
// Reads and writes are internal/rawio's, which the core's sockets use too.

func errno(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e // an Errno below 256 boxes without allocating
}

func sysClose(fd int) {
	syscall.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
}

func sysShutdown(fd, how int) error {
	_, _, e := syscall.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), uintptr(how), 0)
	return errno(e)
}

func sysSplice(in, out int, n int) (int, error) {
	m, _, e := syscall.RawSyscall6(unix.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n),
		unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
	if e != 0 {
		return -1, e
	}
	return int(m), nil
}

func sysSetsockoptInt(fd, level, opt, value int) error {
	v := int32(value)
	_, _, e := syscall.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&v)), 4, 0)
	return errno(e)
}

func sysSoError(fd int) error {
	var v int32
	l := uint32(4)
	_, _, e := syscall.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_ERROR,
		uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return errno(syscall.Errno(v))
}

func sysEpollCtl(epfd, op, fd int, ev *unix.EpollEvent) error {
	_, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd),
		uintptr(unsafe.Pointer(ev)), 0, 0)
	return errno(e)
}

// sockaddr is a raw socket address big enough for IPv6.
type sockaddr struct {
	raw unix.RawSockaddrInet6 // 28 bytes; an IPv4 one fits in its head
}

func (s *sockaddr) addrPort() netip.AddrPort {
	switch s.raw.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.raw))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		p := (*[2]byte)(unsafe.Pointer(&s.raw.Port))
		a := netip.AddrFrom16(s.raw.Addr).Unmap()
		return netip.AddrPortFrom(a, uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// set fills s with a; v6 makes an IPv4 address IPv4-mapped (for an
// AF_INET6 socket). It returns the length to pass to the kernel.
func (s *sockaddr) set(a netip.AddrPort, v6 bool) uint32 {
	*s = sockaddr{}
	ip := a.Addr()
	if ip.Is4() && !v6 {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.raw))
		sa.Family = unix.AF_INET
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		p[0], p[1] = byte(a.Port()>>8), byte(a.Port())
		sa.Addr = ip.As4()
		return unix.SizeofSockaddrInet4
	}
	s.raw.Family = unix.AF_INET6
	p := (*[2]byte)(unsafe.Pointer(&s.raw.Port))
	p[0], p[1] = byte(a.Port()>>8), byte(a.Port())
	s.raw.Addr = ip.As16()
	return unix.SizeofSockaddrInet6
}

func sysAccept4(fd int, sa *sockaddr) (int, error) {
	l := uint32(unsafe.Sizeof(sa.raw))
	n, _, e := syscall.RawSyscall6(unix.SYS_ACCEPT4, uintptr(fd), uintptr(unsafe.Pointer(&sa.raw)),
		uintptr(unsafe.Pointer(&l)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func sysGetsockname(fd int, sa *sockaddr) error {
	l := uint32(unsafe.Sizeof(sa.raw))
	_, _, e := syscall.RawSyscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&sa.raw)),
		uintptr(unsafe.Pointer(&l)))
	return errno(e)
}

func sysSocket(family int) (int, error) {
	n, _, e := syscall.RawSyscall(unix.SYS_SOCKET, uintptr(family),
		unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func sysConnect(fd int, sa *sockaddr, l uint32) error {
	_, _, e := syscall.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa.raw)), uintptr(l))
	return errno(e)
}

func sysBind(fd int, sa *sockaddr, l uint32) error {
	_, _, e := syscall.RawSyscall(unix.SYS_BIND, uintptr(fd), uintptr(unsafe.Pointer(&sa.raw)), uintptr(l))
	return errno(e)
}

// epollWaitNow is epoll_wait with a zero timeout: it never waits.
func epollWaitNow(epfd int, events []unix.EpollEvent) (int, error) {
	n, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
