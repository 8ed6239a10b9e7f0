package core

import (
	"errors"
	"fmt"
	"sync"
)

// MaxQueued bounds what a session holds for its client and has not yet
// written. Handlers append to the queue and never wait for the client:
// a backend connection is read at the server's pace whatever the client
// does, so a client that stops reading cannot make a server's worker
// threads block on the core (and the server look down to everyone). A
// client that falls more than MaxQueued behind is disconnected like one
// that reads nothing for WriteTimeout.
const MaxQueued = 4 << 20

// errQueueFull is a client more than MaxQueued behind.
var errQueueFull = fmt.Errorf("more than %d bytes queued for the client", MaxQueued)

// errOutClosed is a write after the session's output was closed.
var errOutClosed = errors.New("output closed")

// clientOut is a session's output to the client: a queue that handlers
// fill with ss.mu held, drained by the session's writer goroutine (run)
// into the client connection, where WriteTimeout applies.
type clientOut struct {
	ss   *session
	mu   sync.Mutex
	cond sync.Cond
	w    *clientWriter
	buf  []byte // queued, not yet taken by the writer
	busy int    // bytes the writer took and is writing
	// mark: how much of buf Flush released (bytes that arrive after a
	// Flush wait for the next one, as in a bufio.Writer, until buf holds
	// flushAt): what the core logs for an operation is logged before the
	// client can see its answer.
	mark int
	err  error // the writer's failure; Write and Flush return it
	// closing: write what is queued, end the client's writing side and
	// stop; cut: drop what is queued and close the connection.
	closing, cut bool
	done         chan struct{}
}

// flushAt is how much the queue holds before the writer takes it without
// a Flush: a long search streams while its entries keep arriving.
const flushAt = 64 << 10

func newClientOut(ss *session) *clientOut {
	o := &clientOut{ss: ss, w: &clientWriter{c: ss.client, d: orDefault(ss.srv.cfg.WriteTimeout)}, done: make(chan struct{})}
	o.cond.L = &o.mu
	go o.run()
	return o
}

// Write queues p; it never blocks on the client.
func (o *clientOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.err != nil:
		return 0, o.err
	case o.closing:
		return 0, errOutClosed
	case len(o.buf)+o.busy >= MaxQueued:
		return 0, errQueueFull // one PDU may pass the bound; the next is refused
	}
	o.buf = append(o.buf, p...)
	if len(o.buf) >= flushAt {
		o.mark = len(o.buf)
		o.cond.Signal()
	}
	return len(p), nil
}

// Flush lets the writer send what is queued; it does not wait.
func (o *clientOut) Flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return o.err
	}
	if o.mark < len(o.buf) {
		o.mark = len(o.buf)
		o.cond.Signal()
	}
	return nil
}

// sync flushes and waits until everything queued was written (StartTLS:
// the stream changes after its response).
func (o *clientOut) sync() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.mark = len(o.buf)
	o.cond.Signal()
	for o.err == nil && (len(o.buf) > 0 || o.busy > 0) {
		o.cond.Wait()
	}
	return o.err
}

// reset points the writer at a new stream (after a StartTLS handshake);
// the queue is empty then (sync).
func (o *clientOut) reset(w *clientWriter) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w = w
}

// close ends the output: what is queued is written and the client's
// writing side shut (shutWrite), or, with cut, dropped and the
// connection closed. It does not wait; done closes when the writer is
// gone.
func (o *clientOut) close(cut bool) {
	o.mu.Lock()
	o.closing = true
	o.cut = o.cut || cut
	o.cond.Signal()
	o.mu.Unlock()
	if cut {
		o.ss.raw.Close() // frees a write blocked on the client
	}
}

// run is the writer: it drains the queue into the client connection. A
// failed write (the client closed, or read nothing for WriteTimeout)
// ends the session.
func (o *clientOut) run() {
	defer close(o.done)
	var spare []byte
	for {
		o.mu.Lock()
		for !o.cut && o.mark == 0 && !o.closing {
			o.cond.Wait()
		}
		if o.closing {
			o.mark = len(o.buf)
		}
		if o.cut || len(o.buf) == 0 { // closing with nothing left
			cut := o.cut
			o.buf = nil
			o.mu.Unlock()
			if !cut {
				o.ss.shutWrite()
			}
			return
		}
		chunk, w := o.buf[:o.mark], o.w
		o.buf = append(spare[:0], o.buf[o.mark:]...)
		o.busy, o.mark = len(chunk), 0
		o.mu.Unlock()
		_, err := w.Write(chunk)
		o.mu.Lock()
		o.busy = 0
		if err != nil && o.err == nil && !o.cut {
			o.err = err
		}
		failed := o.err
		o.cond.Broadcast()
		o.mu.Unlock()
		if spare = chunk; cap(spare) > 4*flushAt {
			spare = nil // a burst's buffer is not kept for the session's life
		}
		if err != nil {
			if failed != nil {
				o.ss.writerFailed(failed)
			}
			o.close(true)
		}
	}
}

// writerFailed ends the session after the writer failed.
func (ss *session) writerFailed(err error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.writeFailed(err)
	ss.settle()
}
