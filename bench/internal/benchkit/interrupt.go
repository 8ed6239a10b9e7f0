package benchkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// An interrupted program (SIGTERM, SIGINT) still cleans up: Main sends
// SIGTERM to every process Start started and still running, and
// Interrupted says so from then on, so that the run fails at once and
// returns through its deferred cleanups (Stop,
// Release, TempDir's); what the run has not undone within interruptGrace
// (or at a second signal) Main undoes itself: the temp dirs and cgroups
// still there. Then it exits with status 1.
const interruptGrace = 15 * time.Second

// ErrInterrupted is Interrupted's error once SIGTERM or SIGINT came.
var ErrInterrupted = errors.New("interrupted")

var interrupted atomic.Bool

// Interrupted returns ErrInterrupted once the program got SIGTERM or
// SIGINT (Main), nil before: a run checks it between its steps to end
// early, through its deferred cleanups.
func Interrupted() error {
	if interrupted.Load() {
		return ErrInterrupted
	}
	return nil
}

var undo struct {
	sync.Mutex
	next  int
	funcs map[int]func()         // cleanups not run yet
	procs map[*exec.Cmd]struct{} // started and not stopped
}

// undoLater records f for Main to run if the program is interrupted
// before it ran; the func returned runs f (once, whoever calls first).
func undoLater(f func()) func() {
	var once sync.Once
	run := func() { once.Do(f) }
	undo.Lock()
	defer undo.Unlock()
	if undo.funcs == nil {
		undo.funcs = map[int]func(){}
	}
	id := undo.next
	undo.next++
	undo.funcs[id] = run
	return func() {
		undo.Lock()
		delete(undo.funcs, id)
		undo.Unlock()
		run()
	}
}

// started records a process Start started, for an interrupt to stop.
func started(cmd *exec.Cmd) {
	undo.Lock()
	defer undo.Unlock()
	if undo.procs == nil {
		undo.procs = map[*exec.Cmd]struct{}{}
	}
	undo.procs[cmd] = struct{}{}
}

// stopped forgets a process Stop ended.
func stopped(cmd *exec.Cmd) {
	undo.Lock()
	delete(undo.procs, cmd)
	undo.Unlock()
}

// terminateStarted sends SIGTERM to every process started and not stopped.
func terminateStarted() {
	undo.Lock()
	defer undo.Unlock()
	for cmd := range undo.procs {
		cmd.Process.Signal(syscall.SIGTERM)
	}
}

// undoAll kills the processes started and not stopped (a cgroup is
// removed only once its processes are gone) and runs every cleanup not
// run yet.
func undoAll() {
	undo.Lock()
	for cmd := range undo.procs {
		cmd.Process.Kill()
	}
	var fs []func()
	for _, f := range undo.funcs {
		fs = append(fs, f)
	}
	undo.Unlock()
	for _, f := range fs {
		f()
	}
}

// runInterruptible runs run; on SIGTERM or SIGINT it cleans up as
// described above and exits with status 1.
func runInterruptible(name string, run func() error) error {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- run() }()
	var s os.Signal
	select {
	case err := <-done:
		signal.Stop(sig)
		return err
	case s = <-sig:
	}
	fmt.Fprintf(os.Stderr, "bench/%s: %v: stopping the processes it started and cleaning up\n", name, s)
	interrupted.Store(true)
	terminateStarted()
	select {
	case <-done:
	case <-sig:
	case <-time.After(interruptGrace):
	}
	undoAll()
	fmt.Fprintf(os.Stderr, "bench/%s: interrupted by %v\n", name, s)
	os.Exit(1)
	return nil
}
