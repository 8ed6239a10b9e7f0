// Package workers runs functions in goroutines that are reused: the
// handlers of the edge and the front, and the copy directions of splice.
//
//	var handlers workers.Pool  // the zero value is ready; one per kind of work
//	handlers.Go(func() { serve(c) })
package workers

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs functions in goroutines, reusing idle ones. A new goroutine
// starts with a small stack and pays to grow it in the deep calls of a
// relay (dial, splice, logging); a reused one has grown already. At most
// maxIdleWorkers wait for work, each for workerIdle at most; the others
// exit at once, so that a burst of connections, which all go idle
// together, leaves no crowd of grown stacks behind. Keep one Pool per
// kind of work, so that a shallow task does not hold a deep one's stack.
// The zero value is ready to use.
type Pool struct {
	once sync.Once
	work chan func() // unbuffered: a send succeeds only when one waits
	idle atomic.Int32
}

const (
	workerIdle     = 10 * time.Second
	maxIdleWorkers = 64
)

// Go runs f in an idle worker, or a new one.
func (w *Pool) Go(f func()) {
	w.once.Do(func() { w.work = make(chan func()) })
	select {
	case w.work <- f:
	default:
		go w.run(f)
	}
}

// Idle reports how many workers wait for work.
func (w *Pool) Idle() int { return int(w.idle.Load()) }

func (w *Pool) run(f func()) {
	f()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		if w.idle.Add(1) > maxIdleWorkers {
			w.idle.Add(-1)
			return
		}
		select {
		case f = <-w.work:
			w.idle.Add(-1)
			f()
			t.Reset(workerIdle)
		case <-t.C:
			w.idle.Add(-1)
			return
		}
	}
}
