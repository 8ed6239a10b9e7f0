package loopguard

import (
	"io"
	"net/netip"
	"sync"
)

// Own is the set of a relay's own outbound sockets, so that it never
// relays a connection that comes from one of them: an edge whose origin
// is itself, or a front whose inner is itself, would otherwise chain one
// connection until the file descriptors run out.
//
// An outbound socket's local address is known once its connect returns,
// and the listener may accept the looped connection before that. So both
// sides register: Accepted remembers a connection from this host that
// matched nothing yet, and Dialed, finding it, cuts the loop from its side.
// Each is one map operation under a mutex; no system call.
//
// A looped connection also arrives on the port the outbound socket
// dialled. That is checked too: one local port may carry connections to
// different destinations at once, so a client on this host can come from
// the very address:port an outbound socket uses toward an origin without
// being that socket (seen under loopback benchmarks, where every
// connection is from 127.0.0.1).
type Own struct {
	mu  sync.Mutex
	out map[netip.AddrPort]outbound // by the local address of each open outbound socket
	in  map[netip.AddrPort]inbound  // accepted from this host, by remote address, until Forget
}

// outbound is an outbound socket: the port it dialled, and whether a
// connection accepted from it was refused as a loop.
type outbound struct {
	port   uint16
	looped bool
}

// inbound is a connection accepted from this host: how to close it, and
// the port it arrived on.
type inbound struct {
	c    io.Closer
	port uint16
}

// NewOwn returns an empty set.
func NewOwn() *Own {
	return &Own{out: map[netip.AddrPort]outbound{}, in: map[netip.AddrPort]inbound{}}
}

// Accepted reports whether the connection accepted from remote on local
// (IPv4-mapped addresses unmapped) comes from one of the outbound sockets
// (the caller closes it). Otherwise a connection from this host is
// remembered until Forget, for Dialed, which closes it through c if it
// turns out to be a loop.
func (o *Own) Accepted(remote, local netip.AddrPort, c io.Closer) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if out, mine := o.out[remote]; mine && out.port == local.Port() {
		out.looped = true
		o.out[remote] = out
		return true
	}
	if sameHost(remote, local) {
		o.in[remote] = inbound{c, local.Port()}
	}
	return false
}

// Forget drops an accepted connection that is over.
func (o *Own) Forget(remote, local netip.AddrPort, c io.Closer) {
	if !sameHost(remote, local) {
		return
	}
	o.mu.Lock()
	if o.in[remote].c == c {
		delete(o.in, remote)
	}
	o.mu.Unlock()
}

// Dialed records the outbound socket whose local address is local and
// which connects to remote. When a connection accepted earlier came from
// it, the loop is cut: that connection is closed and Dialed reports true
// (the caller closes its socket). It may be called as soon as the connect
// is sent (the local address is known then), before the listener can
// accept the looped connection, and again once connected: it then also
// reports a loop that Accepted found and refused in between.
func (o *Own) Dialed(local, remote netip.AddrPort) bool {
	o.mu.Lock()
	if in, looped := o.in[local]; looped && in.port == remote.Port() {
		delete(o.in, local)
		o.mu.Unlock()
		in.c.Close() // outside the lock: closing may Forget
		return true
	}
	defer o.mu.Unlock()
	if out, ok := o.out[local]; ok {
		return out.looped
	}
	o.out[local] = outbound{port: remote.Port()}
	return false
}

// Closed forgets the outbound socket whose local address is local.
func (o *Own) Closed(local netip.AddrPort) {
	o.mu.Lock()
	delete(o.out, local)
	o.mu.Unlock()
}

func unmap(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// sameHost reports whether a connection between remote and local comes
// from this host; only those are remembered for Dialed (one through a NAT
// hairpin is still caught when Dialed registers first).
func sameHost(remote, local netip.AddrPort) bool {
	return remote.Addr() == local.Addr() || remote.Addr().IsLoopback()
}
