package cli

import (
	"net"
	"runtime"
	"syscall"

	"github.com/edgefleet/edgefleet/internal/evloop"
)

// No edgefleet process serves or writes a heap profile, so none samples
// its allocations: at Go's default rate (one sample per 512 KiB) the
// stack walks of the samples were about 1.5 % of the edge's user-space
// instructions per short connection (callgrind, docs/benchmarks.md).
func init() { runtime.MemProfileRate = 0 }

// NoFile is RLIMIT_NOFILE's soft limit as the Go runtime raised it (to
// the hard one), 0 when unknown.
func NoFile() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	return lim.Cur
}

// Listen listens on every address in addrs, or fails on the first it
// cannot bind (the caller exits then, so none is closed). The sockets
// are evloop.Listen's: SO_REUSEPORT, for the event loops to accept on a
// socket each, and Go's per-connection keepalive off (the edge and the
// front set keepalive and TCP_NODELAY on the listening socket, which
// accepted sockets inherit: relayshell.SetListener).
func Listen(addrs []string) ([]net.Listener, error) {
	var lns []net.Listener
	for _, addr := range addrs {
		ln, err := evloop.Listen(addr)
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}
