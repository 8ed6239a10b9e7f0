package pipepool

import (
	"os"

	"golang.org/x/sys/unix"
)

// pipeSize is asked for with F_SETPIPE_SZ, so that the copies' splice(2)
// calls of up to 1 MiB fit (the kernel may give less).
const pipeSize = 1 << 20

// Pipe is a kernel pipe, the buffer of a splice(2) copy (its read and
// write ends).
type Pipe struct{ R, W int }

// pool keeps pipes between bursts of data. Its size bounds the idle pipes
// the process holds; connections moving data at once may take more.
var pool = make(chan *Pipe, Size)

// Size is the most idle pipes the pool keeps.
const Size = 64

// Idle is the number of pipes in the pool now.
func Idle() int { return len(pool) }

// Get takes a pipe from the pool, or makes one (non-blocking, 1 MiB
// asked for).
func Get() (*Pipe, error) {
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
	return &Pipe{R: fds[0], W: fds[1]}, nil
}

// Put gives back an empty pipe; one that may hold bytes is Closed
// instead.
func Put(p *Pipe) {
	select {
	case pool <- p:
	default:
		p.Close()
	}
}

// Close closes both ends.
func (p *Pipe) Close() {
	unix.Close(p.R)
	unix.Close(p.W)
}
