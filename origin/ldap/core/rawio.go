package core

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/edgefleet/edgefleet/internal/rawio"
	"golang.org/x/sys/unix"
)

// rawSock is a plain TCP connection whose reads and writes are read(2)
// and write(2) calls the Go scheduler is not told of (rawio.ReadNow,
// WriteNow), waiting for readiness in the netpoller as net.Conn does
// (deadlines apply the same way). A system call the scheduler is told of
// wakes sysmon when the process was idle, as it is between the
// operations of one client: a futex call on the way of every answer, and
// a thread that then polls for a while.
//
// Read and Write may run at the same time; each has its own state and
// lock (uncontended: one reader, and writers that hold the session's
// lock).
type rawSock struct {
	*net.TCPConn
	rc syscall.RawConn

	rmu    sync.Mutex
	rp     []byte
	rn     int
	rerr   error
	readFn func(fd uintptr) bool

	wmu     sync.Mutex
	wp      []byte
	wn      int
	werr    error
	writeFn func(fd uintptr) bool
}

// newRawSock wraps c when it is a plain TCP connection; any other
// connection is returned as it is.
func newRawSock(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	s := &rawSock{TCPConn: tc, rc: rc}
	s.readFn, s.writeFn = s.readFD, s.writeFD
	return s
}

func (s *rawSock) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.rp, s.rn, s.rerr = p, 0, nil
	err := s.rc.Read(s.readFn)
	s.rp = nil
	switch {
	case err != nil:
		return 0, s.opError("read", err)
	case s.rerr != nil:
		return 0, s.opError("read", os.NewSyscallError("read", s.rerr))
	case s.rn == 0:
		return 0, io.EOF
	}
	return s.rn, nil
}

// readFD reads once into s.rp; false (wait for readability) when there
// is nothing to read yet.
func (s *rawSock) readFD(fd uintptr) bool {
	for {
		n, err := rawio.ReadNow(int(fd), s.rp)
		switch err {
		case nil:
			s.rn = n
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.rerr = err
		return true
	}
}

func (s *rawSock) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.wp, s.wn, s.werr = p, 0, nil
	err := s.rc.Write(s.writeFn)
	n := s.wn
	s.wp = nil
	switch {
	case err != nil:
		return n, s.opError("write", err)
	case s.werr != nil:
		return n, s.opError("write", os.NewSyscallError("write", s.werr))
	}
	return n, nil
}

// writeFD writes s.wp from s.wn on; false (wait for writability) while
// the socket is full.
func (s *rawSock) writeFD(fd uintptr) bool {
	for s.wn < len(s.wp) {
		n, err := rawio.WriteNow(int(fd), s.wp[s.wn:])
		switch err {
		case nil:
			s.wn += n
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.werr = err
		return true
	}
	return true
}

// opError is err as net.Conn reports it.
func (s *rawSock) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: err}
}

// peerGone reports whether the peer of c has half-closed (the socket is in
// CLOSE_WAIT: its FIN came in), read from TCP_INFO without consuming a
// byte. A TLS client that closes its side after its ClientHello cannot
// read a ServerHello any more: it is a replayed hello, and its handshake
// would be a signature for nobody. Anything that is not a TCP socket, or
// whose state cannot be read, is not gone.
func peerGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var state uint8
	var serr error
	if err := rc.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if serr == nil {
			state = info.State
		}
	}); err != nil || serr != nil {
		return false
	}
	return state == unix.BPF_TCP_CLOSE_WAIT
}
