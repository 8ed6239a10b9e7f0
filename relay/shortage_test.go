package relay

import (
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/prometheus/common/expfmt"
)

// TestDescriptorShortageNamedOriginsStayUp: origins given by name, looked
// up through a real named, and the process's descriptors used up but for
// the two a client and the edge's accept take (RLIMIT_NOFILE lowered,
// the rest filled). The lookup's socket fails with EMFILE, which a
// *net.DNSError keeps as text only: the client is refused as
// local-resources and neither origin is marked OFFLINE, so once
// descriptors are back the first origin serves at once. (Read as the
// origins' failure, both would be OFFLINE for offline_retry and the
// client counted no-origin.)
func TestDescriptorShortageNamedOriginsStayUp(t *testing.T) {
	n := testbed.StartNamed(t, testbed.NamedConfig{Zone: "example.test", Records: []string{"o1 IN A 127.0.0.1", "o2 IN A 127.0.0.1"}})
	old := net.DefaultResolver
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, n.Addr)
	}}
	t.Cleanup(func() { net.DefaultResolver = old })
	served := make(chan struct{}, 1)
	tagged := func(tag string) *testOrigin {
		return startOrigin(t, true, func(c originConn) {
			io.WriteString(c, tag)
			c.CloseWrite()
			io.Copy(io.Discard, c)
			c.tcp.Close()
			served <- struct{}{}
		})
	}
	a, b := tagged("A"), tagged("B")
	port := func(o *testOrigin) string { _, p, _ := net.SplitHostPort(o.addr); return p }
	e := startEdge(t, Config{Origins: OriginList("o1.example.test:"+port(a), "o2.example.test:"+port(b)), OfflineRetry: time.Hour})
	if got := roundTrip(t, e.addr, "x"); got != "A" {
		t.Fatalf("before the shortage the client reached %q, want A", got)
	}
	// Every descriptor of that connection closed (the origin's, the
	// edge's two) before the rest are taken: one closed later would let
	// a query through.
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("the origin did not close the first connection in 10 s")
	}
	e.waitLines(t, "connection closed", 1)

	release := exhaustDescriptors(t, 2)
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		release()
		t.Fatalf("dial the edge with two descriptors free: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, _ := io.ReadAll(c)
	c.Close()
	e.waitValue(t, 1, "edgefleet_edge_connections_total", "result", ResultLocalResources)
	release()

	if len(got) != 0 {
		t.Errorf("the client short of the edge's descriptors got %q, want a refusal", got)
	}
	if logs := e.logs.String(); strings.Contains(logs, "origin offline") || !strings.Contains(logs, "too many open files") {
		t.Errorf("want no origin offline and the lookup's EMFILE logged; log:\n%s", logs)
	}
	if v := e.value(t, "edgefleet_edge_connections_total", "result", ResultNoOrigin); v != 0 {
		t.Errorf("%v clients counted no-origin", v)
	}
	for _, o := range []string{"o1", "o2"} {
		if v := e.value(t, "edgefleet_edge_origin_up", "origin", o); v != 1 {
			t.Errorf("origin_up{%s} = %v after the edge's own shortage, want 1", o, v)
		}
	}
	if got := roundTrip(t, e.addr, "x"); got != "A" {
		t.Errorf("after the shortage the client reached %q, want A (the first origin, never OFFLINE)", got)
	}
}

// exhaustDescriptors lowers this process's RLIMIT_NOFILE to a little
// above its highest descriptor and fills every free number but free with
// duplicates; release (also run at cleanup) closes them and restores the
// limit. The test must not run in parallel with others.
func exhaustDescriptors(t *testing.T, free int) (release func()) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	high := 0
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			high = max(high, n)
		}
	}
	low := lim
	low.Cur = uint64(high + 64)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var dups []int
	for {
		fd, err := syscall.Dup(0)
		if err != nil {
			break
		}
		dups = append(dups, fd)
	}
	for range free {
		syscall.Close(dups[len(dups)-1])
		dups = dups[:len(dups)-1]
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		for _, fd := range dups {
			syscall.Close(fd)
		}
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	t.Cleanup(release)
	return release
}

// TestOriginAddressNeverSaid: an edge with an origin that does not resolve
// (a real named answers NXDOMAIN), one that refuses and one that serves
// says none of their host names or addresses in its metrics or its log
// lines, only the names it gives them (o1, o2, …, or the configured
// ones).
func TestOriginAddressNeverSaid(t *testing.T) {
	n := testbed.StartNamed(t, testbed.NamedConfig{Zone: "example.test", Records: []string{"good IN A 127.0.0.1"}})
	old := net.DefaultResolver
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, n.Addr)
	}}
	t.Cleanup(func() { net.DefaultResolver = old })
	o := startOrigin(t, true, echo)
	_, port, _ := net.SplitHostPort(o.addr)
	refused := testbed.FreeAddr(t, "127.0.0.9")
	e := startEdge(t, Config{Origins: []Origin{
		{Address: "missing.example.test:8636"},
		{Name: "par-b", Address: refused},
		{Address: "good.example.test:" + port},
	}})
	for range 3 {
		if got := roundTrip(t, e.addr, "ping"); got != "ping" {
			t.Fatalf("round trip = %q", got)
		}
	}
	e.waitLines(t, "origin offline", 2)
	var text strings.Builder
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		expfmt.MetricFamilyToText(&text, mf)
	}
	for where, s := range map[string]string{"metrics": text.String(), "log": e.logs.String()} {
		for _, secret := range []string{"missing.example.test", "good.example.test", "127.0.0.9", ":" + port} {
			if strings.Contains(s, secret) {
				t.Errorf("the %s says %q:\n%s", where, secret, s)
			}
		}
	}
	for _, want := range []string{`edgefleet_edge_origin_up{origin="o1"} 0`, `edgefleet_edge_origin_up{origin="par-b"} 0`, `edgefleet_edge_origin_up{origin="o3"} 1`} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("no %s in the metrics:\n%s", want, text.String())
		}
	}
	if !strings.Contains(e.logs.String(), `"err":"dial origin o1: lookup o1 on `) {
		t.Errorf("the lookup's failure is not logged under the origin's name:\n%s", e.logs.String())
	}
}
