package pipepool

import (
	"os"

	"golang.org/x/sys/unix"
)

// pipeSize is asked for with F_SETPIPE_SZ, so that the copies' splice(2)
// calls of up to 1 MiB fit (the kernel may give less).
const pipeSize = 1 << 20

// Pipe is a kernel pipe used as splice's buffer (its read and write ends).
// GetPipe and PutPipe share the pool with a copy made elsewhere (the
// event loops of internal/evloop).
type Pipe struct{ R, W int }

// pool keeps pipes between bursts of data. Its size bounds the idle pipes
// the process holds; connections moving data at once may take more.
var pool = make(chan *Pipe, PoolSize)

// PoolSize is the most idle pipes the pool keeps.
const PoolSize = 64

// IdlePipes is the number of pipes in the pool now.
func IdlePipes() int { return len(pool) }

// GetPipe takes a pipe from the pool, or makes one (non-blocking, 1 MiB
// asked for).
func GetPipe() (*Pipe, error) {
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

// PutPipe gives back an empty pipe; one that may hold bytes is Closed
// instead.
func PutPipe(p *Pipe) {
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
