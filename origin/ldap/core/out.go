package core

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/internal/rawio"
)

// A session never makes a server wait for its client: handlers append
// to the output queue and the backend connections are read at the
// server's pace whatever the client does, so a client that stops reading
// cannot make a server's worker threads block on the core (and the
// server look down to everyone). Pausing a backend connection instead
// would block them too: the connection is the client's own, but slapd's
// worker threads are shared, and one writing to a connection whose
// socket is full waits there. Two bounds keep the queue's memory in
// check instead.
//
// MaxQueued is how far a client may fall behind (answers queued after
// the PDU it is reading; a big PDU being written does not count) and be
// left alone. Beyond it the client must keep taking its answers: one
// that takes no byte during a whole StallWindow is disconnected, like one
// that reads nothing for WriteTimeout. Windows start when it falls
// MaxQueued behind, so a client that stops reading is cut between one
// and two StallWindows after its last read (progress is counted per
// 64 KiB write, so a client over MaxQueued behind must read at least
// 64 KiB per StallWindow, about 13 KiB/s).
//
// A client that reads is never cut for how much is queued, up to
// Config.MaxHeld bytes held for it: the ceiling on the session's
// output memory, whatever the client does.
const (
	MaxQueued   = 4 << 20
	StallWindow = 5 * time.Second
)

// MaxHeld is the most a session holds for its client (queued, or being
// written): two PDUs of the largest size a server may send (MaxBackendPDU,
// or MaxPDU when larger) and MaxQueued more, 132 MiB by default. A PDU
// that would take the session past it disconnects the client, reading or
// not.
func (c Config) MaxHeld() int64 {
	return MaxQueued + 2*int64(max(c.MaxPDU, MaxBackendPDU))
}

// errStalled is a client over MaxQueued behind that took nothing during
// a StallWindow.
var errStalled = fmt.Errorf("more than %d bytes queued for the client and none of it taken for %v", MaxQueued, StallWindow)

// errHeld is a Write that would take the session past MaxHeld (the
// value).
type errHeld int64

func (e errHeld) Error() string {
	return fmt.Sprintf("more than %d bytes held for the client (core.MaxHeld)", int64(e))
}

// errOutClosed is a write after the session's output was closed.
var errOutClosed = errors.New("output closed")

// clientOut is a session's output to the client: a queue that handlers
// fill with ss.mu held, drained by the session's writer goroutine (run)
// into the client connection, where WriteTimeout applies.
//
// When the writer has nothing in hand, what a handler releases is first
// written at once from the handler's own goroutine, without waiting
// (writeNow): on a plain connection whose socket buffer has room, as a
// client that reads has, an answer then costs one write and no hand-off
// to the writer. What the socket does not take at once is queued for the
// writer as before, so a client that stops reading still blocks nobody.
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

	// MaxQueued's accounting, in offsets of the client's stream: in bytes
	// were queued, out written; bigs are the extents of the PDUs of
	// flushAt bytes or more not yet written whole, oldest first (behind).
	in, out int64
	bigs    []extent
	// ceiling is Config.MaxHeld. watch runs checkStall while the client
	// is over MaxQueued behind (watching); seen is out when the current
	// StallWindow began.
	ceiling  int64
	watch    *time.Timer
	watching bool
	seen     int64

	// rc is the plain client connection, for writeNow; nil under TLS (a
	// record cannot be written in part) or when the connection has no
	// file descriptor. now, nowN, nowErr and called are writeNow's, for
	// nowFn (one closure for the session's life: no allocation per
	// write).
	rc     syscall.RawConn
	now    []byte
	nowN   int
	nowErr error
	called bool
	nowFn  func(fd uintptr) bool
}

// flushAt is how much the queue holds before the writer takes it without
// a Flush: a long search streams while its entries keep arriving.
const flushAt = 64 << 10

// extent is where one PDU lies in the client's stream.
type extent struct{ start, end int64 }

// behind is what is queued after the PDU the client is reading: after a
// big one (bigs) being written, its end; else what is not yet written (a
// smaller PDU counts, by at most flushAt). o.mu is held.
func (o *clientOut) behind() int64 {
	for len(o.bigs) > 0 && o.bigs[0].end <= o.out {
		o.bigs = o.bigs[1:]
	}
	if len(o.bigs) == 0 {
		o.bigs = nil
		return o.in - o.out
	}
	if b := o.bigs[0]; b.start <= o.out {
		return o.in - b.end
	}
	return o.in - o.out
}

func newClientOut(ss *session) *clientOut {
	o := &clientOut{ss: ss, w: &clientWriter{c: ss.client, d: orDefault(ss.srv.cfg.WriteTimeout)}, done: make(chan struct{}),
		ceiling: ss.srv.cfg.MaxHeld()}
	o.cond.L = &o.mu
	if sc, ok := ss.client.(syscall.Conn); ok && !ss.isTLS {
		if rc, err := sc.SyscallConn(); err == nil {
			o.rc = rc
			o.nowFn = o.writeFD
		}
	}
	go o.run()
	return o
}

// release hands what is queued on: written at once as far as the socket
// takes it when the writer has nothing in hand (writeNow), the rest
// marked for the writer. o.mu is held.
func (o *clientOut) release() {
	if o.rc != nil && o.mark == 0 && o.busy == 0 && !o.closing && !o.cut && o.err == nil {
		if o.writeNow() || o.err != nil {
			return
		}
	}
	o.mark = len(o.buf)
	o.cond.Signal()
}

// writeNow writes the queue into the client's socket without waiting and
// drops what was written. It reports whether the queue is empty; on a
// failed write o.err is set.
//
// The write needs no deadline: it never waits. It is not tried (false)
// when the connection refuses it before any byte, e.g. once a deadline
// the writer set has passed: the writer then writes, under a new one.
func (o *clientOut) writeNow() bool {
	o.now, o.nowN, o.nowErr, o.called = o.buf, 0, nil, false
	o.rc.Write(o.nowFn)
	n, err, called := o.nowN, o.nowErr, o.called
	o.now, o.nowErr = nil, nil
	if !called {
		return false
	}
	o.out += int64(n)
	if err != nil {
		o.err = fmt.Errorf("write to the client: %w", os.NewSyscallError("write", err))
		return false
	}
	if n == len(o.buf) {
		if o.buf = o.buf[:0]; cap(o.buf) > 4*flushAt {
			o.buf = nil // a burst's buffer is not kept for the session's life
		}
		return true
	}
	o.buf = o.buf[:copy(o.buf, o.buf[n:])]
	return false
}

// writeFD is nowFn: it writes o.now into fd until done or the socket is
// full (EAGAIN), and never asks to wait. rawio.WriteNow, as in rawSock:
// the call does not wake sysmon.
func (o *clientOut) writeFD(fd uintptr) bool {
	o.called = true
	for o.nowN < len(o.now) {
		n, err := rawio.WriteNow(int(fd), o.now[o.nowN:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return true
		case err != nil:
			o.nowErr = err
			return true
		case n <= 0:
			return true
		}
		o.nowN += n
	}
	return true
}

// Write queues p; it never blocks on the client. Once flushAt is queued
// it releases the queue (release).
func (o *clientOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.err != nil:
		return 0, o.err
	case o.closing:
		return 0, errOutClosed
	case o.held()+int64(len(p)) > o.ceiling:
		return 0, errHeld(o.ceiling)
	}
	if len(p) >= flushAt {
		o.bigs = append(o.bigs, extent{o.in, o.in + int64(len(p))})
	}
	o.in += int64(len(p))
	o.buf = append(o.buf, p...)
	if !o.watching && o.behind() >= MaxQueued {
		o.watching, o.seen = true, o.out
		if o.watch == nil {
			o.watch = time.AfterFunc(StallWindow, o.checkStall)
		} else {
			o.watch.Reset(StallWindow)
		}
	}
	if len(o.buf) >= flushAt {
		o.release()
	}
	return len(p), o.err
}

// held is what the session holds for the client: the queue, and the
// chunk the writer took (whole until written: it is one allocation).
// o.mu is held.
func (o *clientOut) held() int64 { return int64(len(o.buf) + o.busy) }

// checkStall runs a StallWindow after the client fell MaxQueued behind,
// and every StallWindow while it stays so: a client that took nothing
// since the last check is disconnected, with what is queued for it.
func (o *clientOut) checkStall() {
	o.mu.Lock()
	switch {
	case o.cut || o.err != nil || o.behind() < MaxQueued:
		o.watching = false
		o.mu.Unlock()
		return
	case o.out != o.seen:
		o.seen = o.out
		o.watch.Reset(StallWindow)
		o.mu.Unlock()
		return
	}
	o.watching = false
	o.err = errStalled
	o.cond.Broadcast()
	o.mu.Unlock()
	o.ss.writerFailed(errStalled)
	o.close(true)
}

// Flush sends what is queued, at once or by the writer; it does not wait.
func (o *clientOut) Flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return o.err
	}
	if o.mark < len(o.buf) {
		o.release()
	}
	return o.err
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
	o.w, o.rc = w, nil // TLS now: records are the writer's
}

// close ends the output: what is queued is written and the client's
// writing side shut (shutWrite), or, with cut, dropped and the
// connection closed. It does not wait; done closes when the writer is
// gone.
func (o *clientOut) close(cut bool) {
	o.mu.Lock()
	o.closing = true
	o.cut = o.cut || cut
	if o.cut && o.watch != nil {
		o.watch.Stop()
		o.watching = false
	}
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
		n, err := o.writeChunk(w, chunk)
		o.mu.Lock()
		o.busy = 0
		o.out += int64(n)
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

// writeChunk writes chunk, counting in o.out what the client took before
// its last piece; it returns the bytes of that piece written, for the
// caller to count. A big PDU the client is reading thus leaves MaxQueued's
// count as it goes (behind).
func (o *clientOut) writeChunk(w *clientWriter, chunk []byte) (int, error) {
	for len(chunk) > writePiece {
		k, err := w.Write(chunk[:writePiece])
		if err != nil {
			return k, err
		}
		o.mu.Lock()
		o.out += int64(k)
		o.mu.Unlock()
		chunk = chunk[k:]
	}
	return w.Write(chunk)
}

// writePiece is what clientWriter writes under one deadline check.
const writePiece = 64 << 10

// writerFailed ends the session after the writer failed.
func (ss *session) writerFailed(err error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.writeFailed(err)
	ss.settle()
}
