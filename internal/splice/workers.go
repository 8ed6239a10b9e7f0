package splice

import (
	"sync/atomic"
	"time"
)

// Go runs f in a goroutine, reusing an idle one when there is one. A new
// goroutine starts with a small stack and pays to grow it in the deep
// calls of a relay (dial, splice, logging); a reused one has grown
// already. Idle goroutines wait workerIdle for work, then exit.
func Go(f func()) {
	select {
	case work <- f: // an idle worker took it
	default:
		go worker(f)
	}
}

// work hands a function to an idle worker; unbuffered, so a send succeeds
// only when one is waiting.
var work = make(chan func())

const workerIdle = 10 * time.Second

// idleWorkers counts the workers waiting for work (tests tell them from
// goroutines that hold a connection).
var idleWorkers atomic.Int32

func worker(f func()) {
	f()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		idleWorkers.Add(1)
		select {
		case f = <-work:
			idleWorkers.Add(-1)
			f()
			t.Reset(workerIdle)
		case <-t.C:
			idleWorkers.Add(-1)
			return
		}
	}
}
