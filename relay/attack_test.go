package relay

import (
	"io"
	"net"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// fdList names this process's descriptors, for a failure message.
func fdList() string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var s []string
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		s = append(s, e.Name()+"="+l)
	}
	return strings.Join(s, " ")
}

// ownSizes is the number of entries in a loopguard.Own's two maps.
func ownSizes(e *Edge) (out, in int) {
	v := reflect.ValueOf(e.own).Elem()
	mu := (*sync.Mutex)(unsafe.Pointer(v.FieldByName("mu").UnsafeAddr()))
	mu.Lock()
	defer mu.Unlock()
	return v.FieldByName("out").Len(), v.FieldByName("in").Len()
}

// rst closes c with a reset (SO_LINGER 0).
func rst(c net.Conn) {
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
}

// TestAttackEveryStageLeavesNothing runs connections that end at every
// stage — an echo, a reset before the origin connect completes, a reset
// between the header and the data, a reset mid-bulk, a client PROXY header,
// a refused first origin, max_conns refusals — and checks that afterwards
// the active gauge is 0, loopguard.Own holds no entry and the descriptors are
// back where they were.
func TestAttackEveryStageLeavesNothing(t *testing.T) {
	var mu sync.Mutex
	hold := make(chan struct{})
	o := startOrigin(t, true, func(c originConn) {
		mu.Lock()
		h := hold
		mu.Unlock()
		<-h
		echo(c)
	})
	go func() {
		for range o.headers {
		}
	}()
	refused := testbed.FreeAddr(t, "127.0.0.1")
	e := startEdge(t, Config{Origins: OriginList(refused, o.addr), MaxConns: 8})
	close(hold)
	// warm up: pipes in the pool, loops running
	for range 3 {
		if got := roundTrip(t, e.addr, "warm"); got != "warm" {
			t.Fatalf("warm-up echo %q", got)
		}
	}
	c, _ := net.Dial("tcp", e.addr)
	big := make([]byte, 4<<20)
	go func() { c.Write(big); c.(*net.TCPConn).CloseWrite() }()
	io.Copy(io.Discard, c)
	c.Close()
	e.waitValue(t, 0, "edgefleet_edge_connections_active")
	time.Sleep(100 * time.Millisecond) // the test origin's side closes
	runtime.GC()
	runtime.GC()
	fd0 := testbed.OpenFDs(0)

	dial := func() net.Conn {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for i := range 200 {
		switch i % 6 {
		case 0: // echo
			if got, err := tryRoundTrip(t, e.addr, "x"); got != "x" {
				t.Fatalf("%d: echo %q, %v; log:\n%s", i, got, err, e.logs.String())
			}
		case 1: // reset at once (often before the dial is over)
			rst(dial())
		case 2: // reset after some bytes went
			c := dial()
			io.WriteString(c, "hello")
			b := make([]byte, 5)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.ReadFull(c, b)
			rst(c)
		case 3: // reset mid-bulk, the client not reading
			c := dial()
			c.Write(big[:1<<20])
			rst(c)
		case 4: // a client's own PROXY header
			c := dial()
			io.WriteString(c, "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n")
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.Copy(io.Discard, c)
			c.Close()
		case 5: // more than max_conns at once
			var cs []net.Conn
			for range 12 {
				cs = append(cs, dial())
			}
			for _, c := range cs {
				rst(c)
			}
			e.waitValue(t, 0, "edgefleet_edge_connections_active")
		}
	}
	e.waitValue(t, 0, "edgefleet_edge_connections_active")
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC() // the Go test origin's splice pipes (sync.Pool) go with a GC
		out, in := ownSizes(e.Edge)
		fd := testbed.OpenFDs(0)
		if out == 0 && in == 0 && fd <= fd0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the connections: own out=%d in=%d, descriptors %d (were %d): %s", out, in, fd, fd0, fdList())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := e.value(t, "edgefleet_edge_origin_up", "origin", "o2"); v != 1 {
		t.Fatalf("the working origin is marked down (%v): a client counted against it", v)
	}
}
