package workers

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestPoolReuses: a second function runs in the goroutine the first one
// left idle (one idle worker, not two), and an idle worker exits after
// workerIdle.
func TestPoolReuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p Pool
		for i := range 2 {
			ran := make(chan struct{})
			p.Go(func() { close(ran) })
			<-ran
			synctest.Wait() // the worker is back waiting for work
			if n := p.Idle(); n != 1 {
				t.Fatalf("after function %d: %d idle workers, want 1", i+1, n)
			}
		}
		time.Sleep(workerIdle + time.Second)
		synctest.Wait()
		if n := p.Idle(); n != 0 {
			t.Fatalf("%d idle workers after %v, want 0", n, workerIdle)
		}
	})
}
