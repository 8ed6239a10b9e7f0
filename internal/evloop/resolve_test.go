package evloop

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/edgefleet/edgefleet/internal/errclass"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// useNamed points net.DefaultResolver at a real named for the test; the
// first fail dials of its queries fail with EMFILE instead, as when this
// process is out of descriptors for a moment.
func useNamed(t *testing.T, fail int32, records ...string) {
	t.Helper()
	n := testbed.StartNamed(t, testbed.NamedConfig{Zone: "example.test", Records: records})
	var dials atomic.Int32
	old := net.DefaultResolver
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		if dials.Add(1) <= fail {
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("socket", syscall.EMFILE)}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, n.Addr)
	}}
	t.Cleanup(func() { net.DefaultResolver = old })
}

// TestResolveThroughDefaultResolver: Resolve asks net.DefaultResolver's
// server (a real named) and returns the first address with the port.
func TestResolveThroughDefaultResolver(t *testing.T) {
	useNamed(t, 0, "o1 IN A 127.0.0.7")
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
	useNamed(t, 1)
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
