// Package splice is the one copy function of every relay path in edgefleet:
// the edge, the origin front and the LDAP core's plain mode all join two
// connections with it.
//
//	res := splice.Join(client, origin) // blocks until both directions are done
//	log.Info("close", "bytes_up", res.Up, "bytes_down", res.Down, "reason", res.Reason)
//
//	c := &splice.Conn{Conn: client, Peeked: sniffed} // bytes read already go first
//	pair := splice.Prepare(c, origin, func(res splice.Result) { … })
//	pair.Screen(check) // optional: the client's first bytes must pass check
//	pair.Run()         // client→origin in this goroutine until it idles; no wait
//	pair.Close()       // e.g. at the end of a drain (Start is Prepare and Run)
//
// Between two *net.TCPConn it moves bytes with splice(2) through a kernel
// pipe, so payload never enters user space. Unlike io.Copy (which holds a
// pipe, two file descriptors, per direction for the whole life of a
// connection), a pipe is taken from a shared pool only while data flows and
// given back as soon as the socket has nothing more to read: an idle relayed
// connection costs its two sockets and nothing else. With Start, a
// direction idle for a moment also gives up its goroutine (it waits in one
// epoll set shared by the process), for servers that hold many idle
// connections, and a burst under 16 KiB is copied through a pooled buffer
// (cheaper than two splices for a few bytes) while bulk data is spliced.
//
// Half-close is propagated: when one side finishes sending (EOF), the other
// side's write half is shut (CloseWrite) and the copy the other way goes on.
// An error in either direction closes both connections, since the surviving
// direction could otherwise wait forever on an idle peer.
package splice

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/edgefleet/edgefleet/internal/workers"
)

// Conn is a connection some of whose bytes were already read (peeked, as
// tcpproxy's Conn): Read returns Peeked first. Join, Start, Prepare and
// Copy forward Peeked before anything else, without waiting for the
// client to send more, and then splice from the connection under it; a
// Screen sees Peeked first. They take Peeked as their own.
type Conn struct {
	net.Conn
	Peeked []byte
}

func (c *Conn) Read(p []byte) (int, error) {
	if len(c.Peeked) > 0 {
		n := copy(p, c.Peeked)
		c.Peeked = c.Peeked[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Result describes how a joined pair of connections ended.
type Result struct {
	Up   int64 // bytes copied from client to server
	Down int64 // bytes copied from server to client
	// Reason is "eof" when both sides finished cleanly, "client-error" or
	// "server-error" when a read or write on that side failed first.
	Reason string
	Err    error // the first error seen, nil for "eof"
}

// Reason values of Result.
const (
	ReasonEOF         = "eof"
	ReasonClientError = "client-error"
	ReasonServerError = "server-error"
)

// Join copies client→server and server→client concurrently until both
// directions have finished, then closes both connections.
func Join(client, server net.Conn) Result {
	j := &joint{client: client, server: server}
	j.left.Store(2)
	upDone := make(chan struct{})
	go func() {
		j.up = j.copy(server, client)
		if j.finish() {
			close(upDone)
		}
	}()
	j.down = j.copy(client, server)
	if !j.finish() {
		<-upDone
	}
	return j.result()
}

// Start is Join without waiting: it returns at once and calls done with
// the Result, from the goroutine that finishes last. A server that holds
// many idle connections uses it: between two *net.TCPConn a direction
// that has been idle for a moment holds no goroutine (it waits in a shared
// epoll set), so an idle pair costs its two sockets and a little heap.
// Close the pair with Pair.Close, not by closing a connection directly:
// an idle direction would not notice.
func Start(client, server net.Conn, done func(Result)) *Pair {
	p := Prepare(client, server, done)
	p.start(true)
	return p
}

// Prepare is Start in two steps, for a caller that registers the pair
// (to close it later) before it runs, and that lends its own goroutine:
// nothing moves until Run.
func Prepare(client, server net.Conn, done func(Result)) *Pair {
	var held []byte
	if c, ok := client.(*Conn); ok {
		client, held = c.Conn, c.Peeked
	}
	j := &joint{client: client, server: server, done: done, held: held}
	j.left.Store(2)
	j.async = newFlows(j, done)
	return &Pair{j: j}
}

// Pair is a pair of connections joined by Start or Prepare.
type Pair struct {
	j       *joint
	started atomic.Bool
}

// Run starts a prepared pair: server→client in a new goroutine, and
// client→server in the caller's, until that direction goes idle or ends
// (it saves a goroutine start, and the caller's stack has usually grown
// already). Like Start, it does not wait for the pair to finish.
func (p *Pair) Run() { p.start(false) }

// ErrMore is what a Screen function returns when the bytes so far are too
// few to decide.
var ErrMore = errors.New("splice: more bytes needed")

// Screen, called before Run, makes the client's first bytes pass check
// before any is forwarded: check sees everything received so far and
// returns nil to forward it (screening ends), ErrMore to wait for more, or
// another error to refuse the client: the pair closes and that error is
// the Result's Err (reason client-error). The check rides on the reads the
// copy makes anyway; it costs a read more only while a client's bytes are
// a prefix check cannot decide on.
func (p *Pair) Screen(check func(first []byte) error) {
	p.j.screen = check
	if p.j.async {
		p.j.flows[0].screen = check
	}
}

// Close closes both connections; done is called once both directions
// have seen it.
func (p *Pair) Close() { p.j.closeBoth() }

func (p *Pair) start(detach bool) {
	if p.started.Swap(true) {
		return
	}
	j := p.j
	if j.async {
		directions.Go(j.flows[1].wait)
		if detach {
			directions.Go(j.flows[0].wait)
		} else {
			j.flows[0].wait()
		}
		return
	}
	go func() {
		j.up = j.screenCopy()
		if j.finish() {
			j.done(j.result())
		}
	}()
	go func() {
		j.down = j.copy(j.client, j.server)
		if j.finish() {
			j.done(j.result())
		}
	}()
}

// directions runs the directions of pairs joined by Start and Prepare.
var directions workers.Pool

// joint is one joined pair of connections.
type joint struct {
	client, server net.Conn
	once           sync.Once
	left           atomic.Int32       // directions still copying
	up, down       half               // each written by its own goroutine before finish
	flows          [2]*flow           // Start's directions (up, down), to resume if parked
	async          bool               // flows are used (both connections plain TCP)
	done           func(Result)       // Start's callback
	screen         func([]byte) error // Pair.Screen's check, nil once passed
	held           []byte             // the client's peeked bytes (a Conn's), forwarded first
}

type half struct {
	n          int64
	rerr, werr error
}

// copy runs one direction; an error in it closes both connections, since
// the surviving direction could otherwise wait forever on an idle peer.
func (j *joint) copy(dst, src net.Conn) half {
	n, rerr, werr := Copy(dst, src)
	if rerr != nil || werr != nil {
		j.closeBoth()
	}
	return half{n, rerr, werr}
}

// screenCopy is copy(server, client) after the client's first bytes have
// passed j.screen, for pairs that are not plain TCP (blocking copies).
func (j *joint) screenCopy() half {
	held := j.held
	if j.screen == nil {
		return j.forward(held)
	}
	buf := make([]byte, 4096)
	m, err := len(held), error(nil) // peeked bytes are screened before any read
	for {
		if m > 0 {
			switch serr := j.screen(held); {
			case serr == nil:
				return j.forward(held)
			case serr != ErrMore:
				j.closeBoth()
				return half{0, serr, nil}
			}
		}
		if err == io.EOF { // a prefix, then EOF: forward it and finish
			n, werr := j.server.Write(held)
			if werr == nil {
				if cw, ok := j.server.(interface{ CloseWrite() error }); ok {
					cw.CloseWrite()
				}
			} else {
				j.closeBoth()
			}
			return half{int64(n), nil, werr}
		}
		if err != nil {
			j.closeBoth()
			return half{0, err, nil}
		}
		m, err = j.client.Read(buf)
		held = append(held, buf[:m]...)
	}
}

// forward writes held (the client's bytes read so far) to the server,
// then copies the rest of the client.
func (j *joint) forward(held []byte) half {
	if len(held) > 0 {
		if _, werr := j.server.Write(held); werr != nil {
			j.closeBoth()
			return half{0, nil, werr}
		}
	}
	h := j.copy(j.server, j.client)
	h.n += int64(len(held))
	return h
}

func (j *joint) closeBoth() {
	j.once.Do(func() {
		j.client.Close()
		j.server.Close()
		j.unpark() // a parked direction would never see the close
	})
}

// finish records that one direction is done and reports whether it was
// the last; the atomic orders both halves' writes before result().
func (j *joint) finish() bool {
	if j.left.Add(-1) != 0 {
		return false
	}
	j.closeBoth()
	return true
}

func (j *joint) result() Result {
	res := Result{Up: j.up.n, Down: j.down.n, Reason: ReasonEOF}
	// The first failure decides the reason. A failure caused by our own
	// closeBoth (net.ErrClosed) is a consequence, so it only counts when
	// nothing else failed.
	fails := []struct {
		err    error
		reason string
	}{
		{j.up.rerr, ReasonClientError}, {j.down.werr, ReasonClientError},
		{j.down.rerr, ReasonServerError}, {j.up.werr, ReasonServerError},
	}
	for _, consequences := range []bool{false, true} {
		for _, f := range fails {
			if f.err != nil && errors.Is(f.err, net.ErrClosed) == consequences {
				res.Reason, res.Err = f.reason, f.err
				return res
			}
		}
	}
	return res
}

// Copy copies src to dst until src reaches EOF, then shuts dst's write half
// and src's read half. It returns the bytes written to dst, the error met
// reading src and the error met writing dst (nil, nil on a clean EOF).
func Copy(dst, src net.Conn) (n int64, rerr, werr error) {
	if c, ok := src.(*Conn); ok {
		if len(c.Peeked) > 0 {
			m, err := dst.Write(c.Peeked)
			n += int64(m)
			if err != nil {
				return n, nil, err
			}
			c.Peeked = nil
		}
		src = c.Conn
	}
	if c, ok := dst.(*Conn); ok {
		dst = c.Conn
	}
	s, sok := src.(*net.TCPConn)
	d, dok := dst.(*net.TCPConn)
	var m int64
	if sok && dok {
		m, rerr, werr = spliceCopy(d, s)
	} else {
		m, rerr, werr = plainCopy(dst, src)
	}
	n += m
	if rerr == nil && werr == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		if cr, ok := src.(interface{ CloseRead() error }); ok {
			cr.CloseRead()
		}
	}
	return n, rerr, werr
}

// plainCopy is io.Copy with the read and write errors told apart.
func plainCopy(dst io.Writer, src io.Reader) (n int64, rerr, werr error) {
	buf := make([]byte, 32<<10)
	for {
		nr, er := src.Read(buf)
		if nr > 0 {
			nw, ew := dst.Write(buf[:nr])
			n += int64(nw)
			if ew != nil {
				return n, nil, ew
			}
		}
		if er == io.EOF {
			return n, nil, nil
		}
		if er != nil {
			return n, er, nil
		}
	}
}
