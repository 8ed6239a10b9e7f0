package evloop

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Listen listens on addr ("host:port", TCP) for Serve: the socket has
// SO_REUSEPORT, so that Serve can give every loop a listening socket of
// its own on the same address (a shard: the kernel spreads the new
// connections over them by their addresses' hash, and a connection
// wakes the one loop whose socket it is queued on). Go's
// per-connection keepalive is off: the relays set keepalive on the
// listening socket, which accepted sockets inherit.
//
// SO_REUSEPORT would also let a second process of the same user bind
// the port and take a share of the connections without a word. Listen
// checks first that no socket listens on the address (a bind without
// SO_REUSEPORT fails then, as a plain listen would): a second edge on
// the same address still fails with "address already in use". Port 0
// needs no check: the kernel picks a port nobody holds.
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: reusePortControl}
	return lc.Listen(context.Background(), "tcp", addr)
}

// reusePortControl checks that address is free (see Listen) and sets
// SO_REUSEPORT on the socket about to be bound to it.
func reusePortControl(_, address string, raw syscall.RawConn) error {
	host, port, err := net.SplitHostPort(address) // host is "" for a wildcard
	if err != nil {
		return err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return err
	}
	var ip netip.Addr
	if host != "" {
		if ip, err = netip.ParseAddr(host); err != nil {
			return err
		}
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		if p != 0 {
			if serr = addressFree(int(fd), ip, uint16(p)); serr != nil {
				return
			}
		}
		serr = os.NewSyscallError("setsockopt", unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1))
	})
	if err == nil {
		err = serr
	}
	return err
}

// addressFree binds a probe socket, like fd (family, IPV6_V6ONLY) but
// without SO_REUSEPORT, to ip (the wildcard when not valid) and port: it
// fails with EADDRINUSE when a socket listens there, shards of another
// process included, and with nothing else.
func addressFree(fd int, ip netip.Addr, port uint16) error {
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return os.NewSyscallError("getsockopt", err)
	}
	if !ip.IsValid() {
		ip = netip.IPv4Unspecified()
		if dom == unix.AF_INET6 {
			ip = netip.IPv6Unspecified()
		}
	}
	p, err := sysSocket(dom)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer sysClose(p)
	sysSetsockoptInt(p, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) // TIME_WAIT leftovers are no conflict
	if dom == unix.AF_INET6 {
		if v, err := unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY); err == nil {
			sysSetsockoptInt(p, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v)
		}
	}
	var sa sockaddr
	n := sa.set(netip.AddrPortFrom(ip.Unmap(), port), dom == unix.AF_INET6)
	if err := sysBind(p, &sa, n); err == unix.EADDRINUSE {
		return os.NewSyscallError("bind", err)
	}
	// Any other failure (an address the probe cannot spell, such as a
	// link-local one with its zone) is the real bind's to report.
	return nil
}

// hasReusePort reports whether the listening socket fd has SO_REUSEPORT
// (made by Listen).
func hasReusePort(fd int) bool {
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT)
	return err == nil && v != 0
}

// shardOpts are the options a shard copies from the listening socket it
// joins, for its accepted sockets to inherit the same (relayshell sets
// them on the socket Serve is given): keepalive, TCP_NODELAY and
// TCP_DEFER_ACCEPT.
var shardOpts = [][2]int{
	{unix.SOL_SOCKET, unix.SO_KEEPALIVE},
	{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
	{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
	{unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
	{unix.IPPROTO_TCP, unix.TCP_NODELAY},
	{unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT},
}

// shardBacklog is the listen(2) backlog of a shard; the kernel lowers it
// to net.core.somaxconn, as Go's own listen does.
const shardBacklog = 65535

// newShard opens another listening socket in fd's SO_REUSEPORT group:
// the same family, address and port (the port fd is bound to, so port 0
// is the one the kernel picked for fd), IPV6_V6ONLY and shardOpts.
func newShard(fd int) (int, error) {
	var sa sockaddr
	if err := sysGetsockname(fd, &sa); err != nil {
		return -1, os.NewSyscallError("getsockname", err)
	}
	dom := int(sa.raw.Family)
	s, err := sysSocket(dom)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	fail := func(op string, err error) (int, error) {
		sysClose(s)
		return -1, os.NewSyscallError(op, err)
	}
	set := [][3]int{{unix.SOL_SOCKET, unix.SO_REUSEADDR, 1}, {unix.SOL_SOCKET, unix.SO_REUSEPORT, 1}}
	if dom == unix.AF_INET6 {
		v, err := unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
		if err != nil {
			return fail("getsockopt", err)
		}
		set = append(set, [3]int{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v})
	}
	for _, o := range shardOpts {
		v, err := unix.GetsockoptInt(fd, o[0], o[1])
		if err != nil {
			return fail("getsockopt", err)
		}
		set = append(set, [3]int{o[0], o[1], v})
	}
	for _, o := range set {
		if err := sysSetsockoptInt(s, o[0], o[1], o[2]); err != nil {
			return fail("setsockopt", err)
		}
	}
	n := uint32(unix.SizeofSockaddrInet4)
	if dom == unix.AF_INET6 {
		n = unix.SizeofSockaddrInet6
	}
	if err := sysBind(s, &sa, n); err != nil {
		return fail("bind", err)
	}
	if err := unix.Listen(s, shardBacklog); err != nil {
		return fail("listen", err)
	}
	return s, nil
}
