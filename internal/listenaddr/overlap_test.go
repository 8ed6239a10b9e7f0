package listenaddr

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestListenOverlap: the pairs Linux refuses to bind both of are reported,
// and the check agrees with the kernel: for each case both addresses are
// really listened on (with the port made concrete), and the second bind
// fails exactly when Overlap says so.
func TestListenOverlap(t *testing.T) {
	for _, tc := range []struct {
		listen []string
		err    string
	}{
		{[]string{":P", "[::]:P"}, `":P" and "[::]:P" are the same socket`},
		{[]string{"0.0.0.0:P", "[::]:P"}, "are the same socket"},
		{[]string{"0.0.0.0:P", "127.0.0.1:P"}, "the wildcard already listens on every address of port P"},
		{[]string{"127.0.0.1:P", ":P"}, "overlap"},
		{[]string{"[::]:P", "[::1]:P"}, "overlap"},
		{[]string{"127.0.0.1:P", "127.0.0.1:P"}, "are the same address"},
		{[]string{"127.0.0.1:P", "[::ffff:127.0.0.1]:P"}, "are the same address"},
		{[]string{"127.0.0.1:P", "127.0.0.2:P"}, ""},
		{[]string{"[::1]:P", "127.0.0.1:P"}, ""},
		{[]string{":P"}, ""},
		{[]string{":0", "[::]:0"}, ""},
	} {
		name := strings.Join(tc.listen, " ")
		t.Run(name, func(t *testing.T) {
			// A port free right now stands for P, so that the kernel can
			// give its verdict on the same addresses. Another process may
			// take that port before the case binds it; a refusal the
			// check did not predict, with the port in use, is then retried
			// on a new port. A wrong verdict of Overlap is wrong on every
			// port, so it still fails after the last try.
			const tries = 10
			for try := 1; ; try++ {
				listen, err := overlapCase(t, tc.listen, tc.err)
				at, bindErr := kernelVerdict(listen)
				if bindErr != nil && (at == 0 || err == nil) && errors.Is(bindErr, syscall.EADDRINUSE) && try < tries {
					t.Logf("try %d: %v (port taken by another process, picking another)", try, bindErr)
					continue
				}
				if at == 0 && bindErr != nil {
					t.Fatalf("the first address of %q cannot be bound at all: %v", listen, bindErr)
				}
				if (bindErr != nil) != (err != nil) {
					t.Fatalf("Overlap says %v, the kernel %v", err, bindErr)
				}
				return
			}
		})
	}
}

// overlapCase makes the pattern concrete on a port free right now and
// checks Overlap's verdict on it against want (P in want is that port too).
func overlapCase(t *testing.T, pattern []string, want string) ([]string, error) {
	t.Helper()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(probe.Addr().(*net.TCPAddr).Port)
	probe.Close()
	var listen []string
	for _, l := range pattern {
		listen = append(listen, strings.ReplaceAll(l, "P", port))
	}
	want = strings.ReplaceAll(want, "P", port)
	err = Overlap(listen)
	if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
		t.Fatalf("Overlap(%q) = %v, want %q", listen, err, want)
	}
	return listen, err
}

// kernelVerdict listens on each address in turn, as cmd/edge and cmd/origin
// do, and returns the index of the first address refused and the refusal;
// every listener it opened is closed again.
func kernelVerdict(listen []string) (int, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	var opened []net.Listener
	defer func() {
		for _, ln := range opened {
			ln.Close()
		}
	}()
	for i, l := range listen {
		ln, err := lc.Listen(context.Background(), "tcp", l)
		if err != nil {
			return i, err
		}
		opened = append(opened, ln)
	}
	return len(listen), nil
}
