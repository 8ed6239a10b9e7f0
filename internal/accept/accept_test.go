package accept

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// scripted is a listener whose Accept returns the scripted errors in turn,
// then accepts from the real loopback listener inside it; at is the time
// each error was returned (the test's Handle adds the accept's).
type scripted struct {
	net.Listener
	errs []error
	at   []time.Time
}

func (s *scripted) Accept() (net.Conn, error) {
	if len(s.errs) > 0 {
		s.at = append(s.at, time.Now())
		err := s.errs[0]
		s.errs = s.errs[1:]
		return nil, err
	}
	return s.Listener.Accept()
}

func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

// TestTemporaryErrorsBackOff: EMFILE, ENFILE and ECONNABORTED never end
// serving; the waits double from 5 ms to 1 s; one log line per window. It
// runs in a synctest bubble, so the waits are the fake clock's moves
// between two accepts, exactly.
func TestTemporaryErrorsBackOff(t *testing.T) {
	synctest.Test(t, testTemporaryErrorsBackOff)
}

func testTemporaryErrorsBackOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var errs []error
	for range 10 {
		errs = append(errs, acceptErr(syscall.EMFILE))
	}
	errs = append(errs, acceptErr(syscall.ENFILE), acceptErr(syscall.ECONNABORTED))
	logs := &testbed.Buffer{}
	got := make(chan net.Conn, 1)
	closing := make(chan struct{})
	sl := &scripted{Listener: ln, errs: errs}
	l := Loop{
		Handle: func(c net.Conn) { sl.at = append(sl.at, time.Now()); got <- c },
		Closing: func() bool {
			select {
			case <-closing:
				return true
			default:
				return false
			}
		},
		Log: slog.New(slog.NewJSONHandler(logs, nil)),
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve(sl) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case a := <-got:
		a.Close()
	case err := <-served:
		t.Fatalf("Serve ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no connection accepted after the temporary errors")
	}
	var waits []time.Duration
	for i := 1; i < len(sl.at); i++ {
		waits = append(waits, sl.at[i].Sub(sl.at[i-1]))
	}
	want := "[5ms 10ms 20ms 40ms 80ms 160ms 320ms 640ms 1s 1s 1s 1s]"
	if fmt.Sprint(waits) != want {
		t.Fatalf("waits %v, want %s", waits, want)
	}
	if lines := logs.JSONLines("accept failed, retrying"); len(lines) != 1 {
		t.Fatalf("%d log lines for 12 errors in one window, want 1:\n%s", len(lines), logs)
	}
	close(closing)
	ln.Close()
	if err := <-served; err != nil {
		t.Fatalf("Serve after Closing: %v, want nil", err)
	}
}

// TestListenerFailureEndsServe: an error that is not temporary ends Serve
// with the error, naming the listener (the binary then exits).
func TestListenerFailureEndsServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l := Loop{Handle: func(c net.Conn) { c.Close() }, Closing: func() bool { return false }}
	err = l.Serve(&scripted{Listener: ln, errs: []error{acceptErr(syscall.EINVAL)}})
	if err == nil || !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "accept on "+ln.Addr().String()) {
		t.Fatalf("Serve = %v, want the EINVAL naming %s", err, ln.Addr())
	}
}
