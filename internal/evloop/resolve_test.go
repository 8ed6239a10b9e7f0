package evloop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/errclass"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// useNamed points net.DefaultResolver at a real named for the test.
// fail, when not nil, is called with each query dial's number (from 1)
// before it is made: an error it returns is that dial's, as when this
// process is out of descriptors for a moment. It returns the count of
// dials.
func useNamed(t *testing.T, fail func(n int32) error, records ...string) *atomic.Int32 {
	t.Helper()
	n := testbed.StartNamed(t, testbed.NamedConfig{Zone: "example.test", Records: records})
	var dials atomic.Int32
	old := net.DefaultResolver
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		if fail != nil {
			if err := fail(dials.Add(1)); err != nil {
				return nil, &net.OpError{Op: "dial", Net: network, Err: err}
			}
		} else {
			dials.Add(1)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, n.Addr)
	}}
	t.Cleanup(func() { net.DefaultResolver = old })
	return &dials
}

// failFirst fails the first dial with err.
func failFirst(err error) func(int32) error {
	return func(n int32) error {
		if n == 1 {
			return err
		}
		return nil
	}
}

// TestResolveThroughDefaultResolver: Resolve asks net.DefaultResolver's
// server (a real named) and returns the first address with the port.
func TestResolveThroughDefaultResolver(t *testing.T) {
	useNamed(t, nil, "o1 IN A 127.0.0.7")
	ap, err := Resolve(context.Background(), "o1.example.test:8636")
	if err != nil || ap.String() != "127.0.0.7:8636" {
		t.Fatalf("Resolve = %v, %v; want 127.0.0.7:8636", ap, err)
	}
	_, err = Resolve(context.Background(), "missing.example.test:8636")
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound || errclass.LocalResources(err) {
		t.Fatalf("a name named does not have: %v (%#v), want not found and no local shortage", err, de)
	}
}

// TestResolveReportsTheShortageOfItsSockets: a lookup one of whose query
// sockets could not be opened (EMFILE) and that then failed reports the
// shortage (errclass.LocalResources), whatever the queries that reached
// named answered, and stays a *net.DNSError, no longer "not found".
func TestResolveReportsTheShortageOfItsSockets(t *testing.T) {
	useNamed(t, failFirst(os.NewSyscallError("socket", syscall.EMFILE)))
	_, err := Resolve(context.Background(), "missing.example.test:8636")
	if err == nil {
		t.Fatal("the lookup of a missing name succeeded")
	}
	if !errclass.LocalResources(err) || !strings.Contains(err.Error(), "too many open files") {
		t.Errorf("err = %v, want the EMFILE of the first query in it", err)
	}
	var de *net.DNSError
	if !errors.As(err, &de) || de.IsNotFound {
		t.Errorf("err = %#v, want a *net.DNSError not marked not found", err)
	}
}

// TestResolveConnectErrorIsNoShortage: a query socket that opened but
// could not connect for want of an address (EADDRNOTAVAIL: a listed
// server this host has no address toward) is no shortage: a name named
// does not have is still not found.
func TestResolveConnectErrorIsNoShortage(t *testing.T) {
	useNamed(t, failFirst(os.NewSyscallError("connect", syscall.EADDRNOTAVAIL)))
	_, err := Resolve(context.Background(), "missing.example.test:8636")
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound || errclass.LocalResources(err) {
		t.Fatalf("err = %v (%#v), want not found and no local shortage", err, de)
	}
}

// TestResolveMergesConcurrentLookups: lookups of one name made while one
// is under way wait for its answer instead of sending queries of their
// own (one resolver for the process): while the first lookup's queries
// are held back, no other is dialled (at most its A and AAAA).
func TestResolveMergesConcurrentLookups(t *testing.T) {
	const lookups = 20
	release := make(chan struct{})
	var held atomic.Int32
	dials := useNamed(t, func(int32) error {
		held.Add(1)
		<-release
		return nil
	}, "o1 IN A 127.0.0.7")
	var started, done sync.WaitGroup
	errs := make(chan error, lookups)
	for range lookups {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			started.Done()
			ap, err := Resolve(context.Background(), "o1.example.test:8636")
			if err == nil && ap.String() != "127.0.0.7:8636" {
				err = fmt.Errorf("Resolve = %v", ap)
			}
			errs <- err
		}()
	}
	started.Wait()
	for deadline := time.Now().Add(10 * time.Second); held.Load() == 0; runtime.Gosched() {
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("no query dialled in 10 s")
		}
	}
	// Unmerged, the other lookups dial too; give them a moment to.
	time.Sleep(200 * time.Millisecond)
	before := dials.Load()
	close(release)
	done.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if before > 2 {
		t.Errorf("%d lookups of one name dialled %d queries while the first was under way, want at most 2 (its A and AAAA)", lookups, before)
	}
}

// TestWithShortage: a not-found DNSError with a shortage added keeps its
// name and server, wraps the errno and is temporary; any other error is
// wrapped.
func TestWithShortage(t *testing.T) {
	short := os.NewSyscallError("socket", syscall.EMFILE)
	err := withShortage(&net.DNSError{Err: "no such host", Name: "o1", Server: "192.0.2.53:53", IsNotFound: true}, short)
	de, ok := err.(*net.DNSError)
	if !ok || de.Name != "o1" || de.Server != "192.0.2.53:53" || de.IsNotFound || !de.IsTemporary {
		t.Fatalf("withShortage(DNSError) = %#v", err)
	}
	if !errors.Is(err, syscall.EMFILE) || err.Error() != "lookup o1 on 192.0.2.53:53: no such host (a query's socket: socket: too many open files)" {
		t.Errorf("withShortage(DNSError) = %q", err)
	}
	if err := withShortage(errors.New("x"), short); !errors.Is(err, syscall.EMFILE) || err.Error() != "x (a query's socket: socket: too many open files)" {
		t.Errorf("withShortage(other) = %q", err)
	}
}
