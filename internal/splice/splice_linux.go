package splice

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// chunk is the most one splice(2) call moves into a pipe; pipeSize is asked
// for with F_SETPIPE_SZ so a chunk fits (the kernel may give less).
const (
	chunk    = 1 << 20
	pipeSize = 1 << 20
)

// pipe is a kernel pipe used as splice's buffer.
type pipe struct{ r, w int }

// pool keeps pipes between bursts of data. Its size bounds the idle pipes
// the process holds; connections moving data at once may take more.
var pool = make(chan *pipe, 256)

func getPipe() (*pipe, error) {
	select {
	case p := <-pool:
		return p, nil
	default:
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, pipeSize)
	return &pipe{r: fds[0], w: fds[1]}, nil
}

func putPipe(p *pipe) {
	select {
	case pool <- p:
	default:
		p.close()
	}
}

func (p *pipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

// spliceCopy moves src's bytes to dst through a pooled pipe, holding the
// pipe only while src has data to read.
func spliceCopy(dst, src *net.TCPConn) (n int64, rerr, werr error) {
	src_, err := src.SyscallConn()
	if err != nil {
		return 0, err, nil
	}
	dst_, err := dst.SyscallConn()
	if err != nil {
		return 0, nil, err
	}
	var p *pipe
	defer func() {
		if p != nil {
			putPipe(p)
		}
	}()
	var peek [1]byte
	for {
		if p == nil {
			// Wait for data (or EOF) without holding a pipe.
			eof := false
			var perr error
			err := src_.Read(func(fd uintptr) bool {
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
			if err != nil {
				return n, err, nil
			}
			if eof {
				return n, nil, nil
			}
			if p, err = getPipe(); err != nil {
				return n, err, nil
			}
		}
		// Fill the pipe with what is there now; EAGAIN ends the burst.
		var m int64
		var serr error
		err := src_.Read(func(fd uintptr) bool {
			for {
				m, serr = unix.Splice(int(fd), nil, p.w, nil, chunk, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				if serr != unix.EINTR {
					return true
				}
			}
		})
		if err == nil && serr != nil && serr != unix.EAGAIN {
			err = os.NewSyscallError("splice", serr)
		}
		if err != nil {
			return n, err, nil
		}
		if serr == unix.EAGAIN {
			putPipe(p)
			p = nil
			continue
		}
		if m == 0 {
			return n, nil, nil // EOF
		}
		// Drain the pipe into dst, waiting for dst to be writable as needed.
		rem := int(m)
		var werr2 error
		err = dst_.Write(func(fd uintptr) bool {
			for rem > 0 {
				w, e := unix.Splice(p.r, nil, int(fd), nil, rem, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
				if e == unix.EINTR {
					continue
				}
				if e == unix.EAGAIN {
					return false
				}
				if e != nil {
					werr2 = os.NewSyscallError("splice", e)
					return true
				}
				rem -= int(w)
				n += w
			}
			return true
		})
		if err == nil {
			err = werr2
		}
		if err != nil {
			// The pipe may still hold bytes: it cannot go back to the pool.
			p.close()
			p = nil
			return n, nil, err
		}
	}
}
