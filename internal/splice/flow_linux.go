package splice

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// flow is one direction of a pair joined by Start. A pipe is held only
// while bytes move. While bytes come, and for idleGrace after the last
// one, a goroutine serves the direction: chatty connections pay no
// goroutine start per message. A direction idle longer than that parks in
// the shared epoll set `parked` and its goroutine exits, so an idle
// connection holds no goroutine and no pipe, only its two sockets and a
// few hundred bytes of heap; data, EOF or an error on its socket resumes
// it in a fresh goroutine.
type flow struct {
	j          *joint
	dst, src   *net.TCPConn
	dr, sr     syscall.RawConn
	h          *half
	done       func(Result)
	grace      time.Duration
	token      uint64             // key in parked.flows; 0 until first parked
	registered bool               // src is in the epoll set (disarmed while not parked)
	bulk       bool               // the last burst was large: start the next with splice
	screen     func([]byte) error // Pair.Screen's check of the first bytes; nil once passed
	held       []byte             // the client's peeked bytes, then those received while screen wanted more
	n          int64
	rerr, werr error
}

// runner is the state of one flow's run, and its src.Read and dst.Write
// callbacks bound to it once. Runners are pooled: a run allocates
// nothing, and an idle flow keeps none of this.
type runner struct {
	f               *flow
	readFn, writeFn func(uintptr) bool
	p               *Pipe // held while a splice burst moves bytes
	armed, moved    bool  // the idle deadline is set; bytes moved since
	burst           int64 // bytes of the burst so far
	serr            error // a read's error, or a refusal
	wb              []byte
	wn              int64
	wer             error
}

var runners = sync.Pool{New: func() any {
	r := &runner{}
	r.readFn, r.writeFn = r.read, r.write
	return r
}}

// idleGrace is how long a direction keeps its goroutine after its last
// byte before it parks. Start reads it once per pair; tests shorten it.
var idleGrace = 100 * time.Millisecond

// newFlows prepares both directions of j; false when the connections are
// not plain TCP and the pair must use blocking copies.
func newFlows(j *joint, done func(Result)) bool {
	c, ok1 := j.client.(*net.TCPConn)
	s, ok2 := j.server.(*net.TCPConn)
	if !ok1 || !ok2 {
		return false
	}
	cr, err := c.SyscallConn()
	if err != nil {
		return false
	}
	sr, err := s.SyscallConn()
	if err != nil {
		return false
	}
	up := &flow{j: j, dst: s, src: c, sr: cr, dr: sr, h: &j.up, done: done, grace: idleGrace, held: j.held}
	down := &flow{j: j, dst: c, src: s, sr: sr, dr: cr, h: &j.down, done: done, grace: idleGrace}
	// The epoll set is made with the first pair, not when the first
	// direction goes idle, so that it is part of the process's fixed cost.
	parked.once.Do(parked.start)
	j.flows = [2]*flow{up, down}
	return true
}

// wait is a goroutine's entry point: it runs the direction until src goes
// idle (then parks it) or the direction is over (then finishes it).
func (f *flow) wait() {
	if f.run() {
		parked.park(f)
		return
	}
	switch {
	case f.rerr != nil || f.werr != nil:
		f.j.closeBoth()
	case f.j.left.Load() == 2:
		f.dst.CloseWrite()
		// else the other direction is over: closeBoth, next, sends the FIN
	}
	*f.h = half{f.n, f.rerr, f.werr}
	if f.j.finish() {
		f.done(f.j.result())
	}
}

// small is the size of the buffer small bursts are copied through: for a
// few bytes, read and write cost less than two splices through a pipe (the
// choice HAProxy's splice-auto makes). A burst that fills it switches the
// direction to splice until it is idle again.
const small = 16 << 10

var smallBufs = sync.Pool{New: func() any { return new([small]byte) }}

// run moves src's bytes to dst until EOF, an error, or src being idle for
// f.grace (it then returns true). Everything happens inside one src.Read:
// a read or splice that finds nothing (EAGAIN) makes the poller wait, with
// no separate readiness check whose result a later wait could miss. A
// buffer or pipe is taken from its pool for each read and given back at
// once (a pipe at EAGAIN), so a waiting direction holds neither. The
// state of a run is a pooled runner, so a run allocates nothing.
func (f *flow) run() (idle bool) {
	r := runners.Get().(*runner)
	r.f = f
	var err error
	if r.flushHeld() {
		err = f.sr.Read(r.readFn)
	}
	if p := r.p; p != nil {
		if f.werr != nil {
			p.Close() // it may still hold bytes
		} else {
			PutPipe(p)
		}
	}
	serr := r.serr
	*r = runner{readFn: r.readFn, writeFn: r.writeFn}
	runners.Put(r)
	if f.werr != nil {
		return false
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		f.src.SetReadDeadline(time.Time{})
		return true
	}
	if err == nil {
		err = serr
	}
	f.rerr = err
	return false
}

// flushHeld forwards the bytes the pair started with (a Conn's Peeked)
// before the first read, for a client that sends nothing more until it
// has an answer: at once when nothing screens them or they pass the
// screen; kept, for the reads to add to, when the screen wants more. It
// reports whether the run goes on.
func (r *runner) flushHeld() bool {
	f := r.f
	if len(f.held) == 0 {
		return true
	}
	if f.screen != nil {
		switch err := f.screen(f.held); {
		case err == ErrMore:
			return true
		case err != nil:
			f.held = nil
			r.serr = err
			return false
		}
		f.screen = nil
	}
	var w int64
	w, f.werr = r.writeAll(f.held)
	f.n += w
	f.held = nil
	return f.werr == nil
}

// idleNow ends a burst at EAGAIN: the next one starts with a small read
// unless this one was bulk, and the grace counts from the last byte (the
// deadline is set here, before the poller waits, and only when it moves).
func (r *runner) idleNow() bool {
	f := r.f
	f.bulk = r.burst >= small
	r.burst = 0
	if r.moved || !r.armed {
		f.src.SetReadDeadline(time.Now().Add(f.grace))
		r.moved, r.armed = false, true
	}
	return false
}

// read is run's src.Read callback: it returns false to wait for src.
func (r *runner) read(fd uintptr) bool {
	f := r.f
	for {
		if !f.bulk {
			b := smallBufs.Get().(*[small]byte)
			m, e := ReadNow(int(fd), b[:])
			switch {
			case e == unix.EINTR:
				smallBufs.Put(b)
				continue
			case e == unix.EAGAIN:
				smallBufs.Put(b)
				return r.idleNow()
			case e != nil:
				smallBufs.Put(b)
				r.serr = os.NewSyscallError("read", e)
				return true
			case m == 0: // EOF
				smallBufs.Put(b)
				if len(f.held) > 0 { // a prefix the screen could not decide on
					var w int64
					w, f.werr = r.writeAll(f.held)
					f.n += w
					f.held = nil
				}
				return true
			}
			data := b[:m]
			if f.screen != nil {
				if f.held != nil {
					f.held = append(f.held, data...)
					data = f.held
				}
				switch err := f.screen(data); {
				case err == ErrMore:
					if f.held == nil {
						f.held = append([]byte(nil), data...)
					}
					smallBufs.Put(b)
					continue
				case err != nil:
					smallBufs.Put(b)
					f.held = nil
					r.serr = err
					return true
				}
				f.screen = nil
			}
			var w int64
			w, f.werr = r.writeAll(data)
			f.held = nil
			smallBufs.Put(b)
			f.n += w
			r.burst += w
			if f.werr != nil {
				return true
			}
			r.moved = true
			f.bulk = m == small
			continue
		}
		if r.p == nil {
			if r.p, r.serr = GetPipe(); r.serr != nil {
				return true
			}
		}
		m, e := unix.Splice(int(fd), nil, r.p.W, nil, chunk, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			PutPipe(r.p) // empty: every splice in is drained before the next
			r.p = nil
			return r.idleNow()
		case e != nil:
			r.serr = os.NewSyscallError("splice", e)
			return true
		case m == 0: // EOF
			return true
		}
		var w int64
		w, f.werr = drain(f.dr, r.p, m)
		f.n += w
		r.burst += w
		if f.werr != nil {
			return true
		}
		r.moved = true
	}
}

// writeAll writes b to dst, waiting for dst to be writable as needed.
func (r *runner) writeAll(b []byte) (n int64, err error) {
	r.wb, r.wn, r.wer = b, 0, nil
	err = r.f.dr.Write(r.writeFn)
	if err == nil {
		err = r.wer
	}
	n = r.wn
	r.wb, r.wer = nil, nil
	return n, err
}

// write is writeAll's dst.Write callback.
func (r *runner) write(fd uintptr) bool {
	for len(r.wb) > 0 {
		w, e := WriteNow(int(fd), r.wb)
		if e == unix.EINTR {
			continue
		}
		if e == unix.EAGAIN {
			return false
		}
		if e != nil {
			r.wer = os.NewSyscallError("write", e)
			return true
		}
		r.wb = r.wb[w:]
		r.wn += int64(w)
	}
	return true
}

// drain writes the m bytes in the pipe to dst, waiting for dst to be
// writable as needed.
func drain(dst syscall.RawConn, p *Pipe, m int64) (n int64, err error) {
	rem := int(m)
	var werr error
	err = dst.Write(func(fd uintptr) bool {
		for rem > 0 {
			w, e := unix.Splice(p.R, nil, int(fd), nil, rem, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if e == unix.EINTR {
				continue
			}
			if e == unix.EAGAIN {
				return false
			}
			if e != nil {
				werr = os.NewSyscallError("splice", e)
				return true
			}
			rem -= int(w)
			n += w
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return n, err
}

// parker is one epoll set holding the idle directions of every pair, and
// the goroutine that resumes them.
type parker struct {
	once sync.Once
	epfd int
	err  error

	mu    sync.Mutex
	next  uint64
	flows map[uint64]*flow // parked now
}

var parked parker

// park hands f's goroutine back: f resumes in a new goroutine when src is
// readable or has hung up, or when its pair is closed. If src cannot be
// watched (it was closed meanwhile, or there is no epoll), f resumes at once
// and meets the error itself.
func (p *parker) park(f *flow) {
	p.once.Do(p.start)
	if p.err != nil {
		go f.wait() // no epoll: wait in a goroutine as Join does
		return
	}
	p.mu.Lock()
	if f.token == 0 {
		p.next++
		f.token = p.next
	}
	p.flows[f.token] = f // before arming: the event may come at once
	p.mu.Unlock()

	var cerr error
	err := f.sr.Control(func(fd uintptr) {
		// Fd and Pad are the two halves of epoll_event's data union.
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT,
			Fd: int32(uint32(f.token)), Pad: int32(uint32(f.token >> 32))}
		op := unix.EPOLL_CTL_MOD // ONESHOT left it in the set, disarmed
		if !f.registered {
			op = unix.EPOLL_CTL_ADD
		}
		if cerr = unix.EpollCtl(p.epfd, op, int(fd), &ev); cerr == nil {
			f.registered = true
		}
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		p.resume(f.token)
	}
}

// resume starts a goroutine for the flow parked under token, if it is
// still parked (whoever resumes it first wins).
func (p *parker) resume(token uint64) {
	if token == 0 {
		return
	}
	p.mu.Lock()
	f := p.flows[token]
	delete(p.flows, token)
	p.mu.Unlock()
	if f != nil {
		directions.Go(f.wait)
	}
}

func (p *parker) start() {
	if p.epfd, p.err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); p.err != nil {
		return
	}
	p.flows = map[uint64]*flow{}
	go p.loop()
}

// loop resumes parked flows as their sockets become readable. A closed
// socket leaves the epoll set silently, which is why closing a pair goes
// through joint.closeBoth, which resumes its parked flows itself.
func (p *parker) loop() {
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if err != nil {
			if err != unix.EINTR {
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		for i := range events[:n] {
			ev := &events[i]
			p.resume(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32)
		}
	}
}

// unpark resumes the parked directions of a pair that is being closed, so
// that they see the close and finish.
func (j *joint) unpark() {
	for _, f := range j.flows {
		if f != nil {
			parked.resume(f.token)
		}
	}
}
