package splice

import (
	"net"
	"os"
	"syscall"

	"github.com/edgefleet/edgefleet/internal/pipepool"
	"golang.org/x/sys/unix"
)

// chunk is the most one splice(2) call moves into a pipe (a pooled pipe
// holds pipeSize).
const chunk = 1 << 20

// spliceCopy moves src's bytes to dst through a pooled pipe, holding the
// pipe only while src has data to read.
func spliceCopy(dst, src *net.TCPConn) (n int64, rerr, werr error) {
	sr, err := src.SyscallConn()
	if err != nil {
		return 0, err, nil
	}
	dr, err := dst.SyscallConn()
	if err != nil {
		return 0, nil, err
	}
	for {
		eof, err := waitData(sr)
		if err != nil || eof {
			return n, err, nil
		}
		m, eof, rerr, werr := burst(dr, sr)
		n += m
		if rerr != nil || werr != nil || eof {
			return n, rerr, werr
		}
	}
}

// waitData blocks until src has data to read or has reached EOF, holding
// nothing but the goroutine. It peeks (MSG_PEEK) rather than reads, so no
// buffer is needed.
func waitData(src syscall.RawConn) (eof bool, err error) {
	var peek [1]byte
	var perr error
	err = src.Read(func(fd uintptr) bool {
		m, _, e := unix.Recvfrom(int(fd), peek[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case e == unix.EAGAIN || e == unix.EINTR:
			return false
		case e != nil:
			perr = os.NewSyscallError("recvfrom", e)
		case m == 0:
			eof = true
		}
		return true
	})
	if err == nil {
		err = perr
	}
	return eof, err
}

// burst moves what src has to dst through a pipe taken from the pool,
// until src has nothing more to read right now (the pipe goes back to the
// pool), reaches EOF, or fails.
func burst(dst, src syscall.RawConn) (n int64, eof bool, rerr, werr error) {
	p, err := pipepool.Get()
	if err != nil {
		return 0, false, err, nil
	}
	for {
		// Fill the pipe with what is there now; EAGAIN ends the burst.
		var m int64
		var serr error
		err := src.Read(func(fd uintptr) bool {
			for {
				m, serr = unix.Splice(int(fd), nil, p.W, nil, chunk, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				if serr != unix.EINTR {
					return true
				}
			}
		})
		if err == nil && serr != nil && serr != unix.EAGAIN {
			err = os.NewSyscallError("splice", serr)
		}
		if err != nil {
			pipepool.Put(p) // empty: every burst drains it
			return n, false, err, nil
		}
		if serr == unix.EAGAIN || m == 0 {
			pipepool.Put(p)
			return n, m == 0 && serr == nil, nil, nil
		}
		// Drain the pipe into dst, waiting for dst to be writable as needed.
		w, err := drain(dst, p, m)
		n += w
		if err != nil {
			// The pipe may still hold bytes: it cannot go back to the pool.
			p.Close()
			return n, false, nil, err
		}
	}
}

// drain writes the m bytes in the pipe to dst, waiting for dst to be
// writable as needed.
func drain(dst syscall.RawConn, p *pipepool.Pipe, m int64) (n int64, err error) {
	rem := int(m)
	var werr error
	err = dst.Write(func(fd uintptr) bool {
		for rem > 0 {
			w, e := unix.Splice(p.R, nil, int(fd), nil, rem, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if e == unix.EINTR {
				continue
			}
			if e == unix.EAGAIN {
				return false
			}
			if e != nil {
				werr = os.NewSyscallError("splice", e)
				return true
			}
			rem -= int(w)
			n += w
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return n, err
}
