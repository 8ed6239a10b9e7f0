// Package splice is the blocking copy of a pair of connections both ways,
// the LDAP core's plain mode: Join, Copy, and Conn for bytes already read
// (they go first).
//
//	res := splice.Join(client, origin) // blocks until both directions are done
//	log.Info("close", "bytes_up", res.Up, "bytes_down", res.Down, "reason", res.Reason)
//
//	c := &splice.Conn{Conn: client, Peeked: sniffed} // bytes read already go first
//
// Between two *net.TCPConn it moves bytes with splice(2) through a kernel
// pipe, so payload never enters user space. Unlike io.Copy (which holds a
// pipe, two file descriptors, per direction for the whole life of a
// connection), a pipe is taken from the shared pool (internal/pipepool)
// only while data flows and given back as soon as the socket has nothing
// more to read.
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
)

// Conn is a connection some of whose bytes were already read (peeked, as
// tcpproxy's Conn): Read returns Peeked first. Join and Copy forward
// Peeked before anything else, without waiting for the client to send
// more, and then splice from the connection under it. They take Peeked as
// their own.
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

// joint is one joined pair of connections.
type joint struct {
	client, server net.Conn
	once           sync.Once
	left           atomic.Int32 // directions still copying
	up, down       half         // each written by its own goroutine before finish
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

func (j *joint) closeBoth() {
	j.once.Do(func() {
		j.client.Close()
		j.server.Close()
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
