package testbed

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// UDPRelay forwards datagrams between its loopback address and a target
// (a DNS server), counting what clients send: how many queries a client
// really made. Silence turns it into a server that never answers.
type UDPRelay struct {
	Addr string // 127.0.0.1:port

	pc      net.PacketConn
	target  string
	queries atomic.Int64
	silent  atomic.Bool

	mu       sync.Mutex
	upstream map[string]net.Conn // per client address
}

// StartUDPRelay relays to target until the test ends.
func StartUDPRelay(t testing.TB, target string) *UDPRelay {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &UDPRelay{Addr: pc.LocalAddr().String(), pc: pc, target: target, upstream: map[string]net.Conn{}}
	go r.serve()
	t.Cleanup(func() {
		pc.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.upstream {
			c.Close()
		}
	})
	return r
}

// Queries is the number of datagrams clients sent so far.
func (r *UDPRelay) Queries() int { return int(r.queries.Load()) }

// Silence makes the relay drop (on) or forward (off) what clients send;
// dropped datagrams are counted too.
func (r *UDPRelay) Silence(on bool) { r.silent.Store(on) }

func (r *UDPRelay) serve() {
	buf := make([]byte, 65535)
	for {
		n, from, err := r.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		r.queries.Add(1)
		if r.silent.Load() {
			continue
		}
		up, err := r.upstreamFor(from)
		if err != nil {
			continue
		}
		up.Write(buf[:n])
	}
}

// upstreamFor is the client's own socket to the target, whose answers go
// back to the client.
func (r *UDPRelay) upstreamFor(client net.Addr) (net.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.upstream[client.String()]; ok {
		return c, nil
	}
	c, err := net.Dial("udp", r.target)
	if err != nil {
		return nil, err
	}
	r.upstream[client.String()] = c
	go func() {
		buf := make([]byte, 65535)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if !r.silent.Load() {
				r.pc.WriteTo(buf[:n], client)
			}
		}
	}()
	return c, nil
}
