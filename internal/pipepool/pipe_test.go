package pipepool

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestGetPut: a pipe given back is the next one taken (no new
// descriptors), its ends are non-blocking, and the pool keeps at most
// Size idle pipes, closing the rest.
func TestGetPut(t *testing.T) {
	p, err := Get()
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range []int{p.R, p.W} {
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil || fl&unix.O_NONBLOCK == 0 {
			t.Fatalf("fd %d flags %#x, %v: want O_NONBLOCK", fd, fl, err)
		}
	}
	Put(p)
	if q, _ := Get(); q != p {
		t.Fatal("Get after Put made a new pipe instead of reusing the pooled one")
	}
	Put(p)
	var taken []*Pipe
	for len(taken) < Size+1 {
		q, err := Get()
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, q)
	}
	for _, q := range taken {
		Put(q)
	}
	if Idle() != Size {
		t.Fatalf("Idle() = %d after %d pipes were given back, want Size = %d", Idle(), len(taken), Size)
	}
	last := taken[len(taken)-1]
	if _, err := unix.FcntlInt(uintptr(last.W), unix.F_GETFD, 0); err != unix.EBADF {
		t.Fatalf("the pipe given back to a full pool is still open (%v)", err)
	}
}
