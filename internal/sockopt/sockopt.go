// Package sockopt sets the TCP keepalive options the edge and the origin
// front share, on a listening socket (accepted sockets inherit them, so
// there is no setsockopt per connection) or on one connection.
//
//	ka := sockopt.Keepalive{Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}
//	lc := net.ListenConfig{KeepAlive: -1, Control: ka.Control} // Go sets none of its own
//	ok := ka.Has(conn)                                          // did an accepted socket inherit it?
package sockopt

import (
	"errors"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Keepalive is TCP keepalive: the idle time before the first probe, the
// time between probes and how many unanswered probes drop the
// connection (each time rounded down to whole seconds, at least 1). The
// zero Keepalive turns keepalive off.
type Keepalive struct {
	Idle, Interval time.Duration
	Count          int
}

func (k Keepalive) on() bool { return k.Idle > 0 }

// opts is what k sets, as (level, option, value).
func (k Keepalive) opts() [][3]int {
	if !k.on() {
		return [][3]int{{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 0}}
	}
	return [][3]int{
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs(k.Idle)},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, secs(k.Interval)},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, k.Count},
	}
}

func secs(d time.Duration) int { return max(int(d/time.Second), 1) }

// NoDelay sets TCP_NODELAY on a connection or a listening socket (whose
// accepted sockets inherit it).
func NoDelay(s any) error {
	raw, err := rawConn(s)
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}); err != nil {
		return err
	}
	return serr
}

// Each calls f with every (level, option, value) k sets, for a caller
// that makes the setsockopt calls itself on a raw socket.
func (k Keepalive) Each(f func(level, opt, value int)) {
	for _, o := range k.opts() {
		f(o[0], o[1], o[2])
	}
}

// Set applies k to a connection or a listening socket (anything that is a
// syscall.Conn).
func (k Keepalive) Set(s any) error {
	raw, err := rawConn(s)
	if err != nil {
		return err
	}
	return k.Control("", "", raw)
}

// Control applies k to a socket; it is a net.ListenConfig or net.Dialer
// Control function.
func (k Keepalive) Control(_, _ string, raw syscall.RawConn) error {
	var serr error
	err := raw.Control(func(fd uintptr) {
		for _, o := range k.opts() {
			if serr = unix.SetsockoptInt(int(fd), o[0], o[1], o[2]); serr != nil {
				return
			}
		}
	})
	if err == nil {
		err = serr
	}
	return err
}

// Has reports whether the socket s has exactly k (off when k is zero).
func (k Keepalive) Has(s any) bool {
	raw, err := rawConn(s)
	if err != nil {
		return false
	}
	same := true
	err = raw.Control(func(fd uintptr) {
		for _, o := range k.opts() {
			v, err := unix.GetsockoptInt(int(fd), o[0], o[1])
			if err != nil || v != o[2] {
				same = false
				return
			}
		}
	})
	return err == nil && same
}

func rawConn(s any) (syscall.RawConn, error) {
	sc, ok := s.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// DeferAccept sets TCP_DEFER_ACCEPT on a listening socket: the kernel
// completes a connection only once its first data arrive, so accept and
// the first read come in one wake-up. A client that sends nothing is
// held in the kernel (no descriptor, no accept) for d, whole seconds at
// least 1 rounded up to the SYN-ACK retransmissions (1, 3, 7, 15 s…);
// its acknowledgement of the last retransmitted SYN-ACK then completes
// it without data. d 0 turns it off.
func DeferAccept(ln any, d time.Duration) error {
	raw, err := rawConn(ln)
	if err != nil {
		return err
	}
	v := 0
	if d > 0 {
		v = secs(d)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, v)
	}); err != nil {
		return err
	}
	return serr
}
