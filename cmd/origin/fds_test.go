package main

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestSurvivesFDExhaustion: the origin binary under a
// low RLIMIT_NOFILE is flooded with connections until accept fails with
// "too many open files"; once the flood is gone, it accepts and serves
// again. The core used to stop accepting for good while its listener
// stayed open. Each server is flooded on its own: flooding the front with
// the core behind it in the same process can leave the front's
// connections holding every descriptor while they wait for the core to
// accept their inner connections, which it then cannot.
func TestSurvivesFDExhaustion(t *testing.T) {
	bin := buildOrigin(t)
	echo := testbed.EchoTCP(t)
	for _, tc := range []struct {
		name  string
		flood string // "front" or "core"
		core  bool
	}{{"core", "core", true}, {"front", "front", false}} {
		t.Run(tc.name, func(t *testing.T) {
			front := testbed.FreeAddr(t, "127.0.0.1")
			coreAddr := testbed.FreeAddr(t, "127.0.0.1")
			inner := coreAddr
			if !tc.core {
				inner = echo
			}
			// max_conns above what 40 descriptors allow (the default
			// would fit them): the flood must run the process out.
			cfg := originYAML(t, front, inner, "", []string{"max_conns: 100000"}, []string{
				fmt.Sprintf("enabled: %v", tc.core), fmt.Sprintf("listen: %q", coreAddr), "proxy_mode: 0", fmt.Sprintf("default_server: %q", echo)})
			p := testbed.StartNofile(t, 40, bin, "--config", cfg)
			testbed.WaitTCP(t, front, 10*time.Second)
			testbed.WaitOutput(t, p, 10*time.Second, "front.max_conns needs more descriptors than RLIMIT_NOFILE",
				`"max_conns":100000`, `"rlimit_nofile":40`)
			flooded := map[string]string{"front": front, "core": coreAddr}[tc.flood]
			closeAll := testbed.Flood(t, flooded, 60)
			testbed.WaitOutput(t, p, 20*time.Second, "accept failed, retrying", "too many open files", flooded)
			closeAll()
			echoed(t, flooded, "after the flood")
			echoed(t, front, "through the front")
			if p.Cmd.ProcessState != nil {
				t.Fatalf("the origin exited: %v", p.Cmd.ProcessState)
			}
		})
	}
}

// echoed round-trips msg through addr (a server that forwards to an echo
// service), retrying for a while: a server that backed off may take up to
// a second to accept again.
func echoed(t *testing.T, addr, msg string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, msg)
			c.(*net.TCPConn).CloseWrite()
			var b []byte
			b, err = io.ReadAll(c)
			c.Close()
			if err == nil && string(b) == msg {
				return
			}
			if err == nil {
				err = fmt.Errorf("got %q", b)
			}
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s does not serve again: %v", addr, last)
}

// TestCombinedSurvivesFDExhaustion: the front with the core behind it in
// one process, flooded through the front under a low RLIMIT_NOFILE until
// the descriptors run out ("too many open files": at an accept, which
// backs off, or at a dial, refused as local resources — which comes first
// depends on how many are left), the flood held 2 s more with idle connections to the
// metrics server; seconds after it ends a normal client is served through
// the front again, and every line the flood causes is rate-limited. With
// the default front.max_conns this flood wedged the process (4 of 4 runs):
// the front's connections, their clients gone, held every descriptor while
// they waited for the core to accept their inner connections, which it
// could not do without one. front.max_conns at a fifth of the limit
// (four descriptors per connection in the front and the core) leaves the
// core room to accept.
func TestCombinedSurvivesFDExhaustion(t *testing.T) {
	bin := buildOrigin(t)
	echo := testbed.EchoTCP(t)
	front := testbed.FreeAddr(t, "127.0.0.1")
	core := testbed.FreeAddr(t, "127.0.0.1")
	metrics := testbed.FreeAddr(t, "127.0.0.1")
	cfg := originYAML(t, front, core, metrics, []string{"max_conns: 8"}, []string{
		fmt.Sprintf("listen: %q", core), "proxy_mode: 0", fmt.Sprintf("default_server: %q", echo)})
	p := testbed.StartNofile(t, 40, bin, "--config", cfg)
	testbed.WaitTCP(t, front, 10*time.Second)
	echoed(t, front, "before the flood")
	closeAll := testbed.Flood(t, front, 400)
	testbed.WaitOutput(t, p, 20*time.Second, "too many open files")
	for range 5 { // wait in the metrics server's queue: its accept fails too
		if c, err := net.DialTimeout("tcp", metrics, time.Second); err == nil {
			defer c.Close()
		}
	}
	time.Sleep(2 * time.Second)
	closeAll()
	echoed(t, front, "after the flood")
	if p.Cmd.ProcessState != nil {
		t.Fatalf("the origin exited: %v", p.Cmd.ProcessState)
	}
	// Every line about the flood is rate-limited (accept: 1, the front's
	// refusals: 10, the core's local-resource dials: 1 per 10 s), not one
	// per connection: the core's plain mode used to log each failed dial.
	if n := strings.Count(p.Output(), "too many open files"); n > 40 {
		t.Errorf("%d lines about the flood: not rate-limited", n)
	}
}

// TestMaxConnsFromNofile: under the RLIMIT_NOFILE of a default machine
// (20000) the origin's default front.max_conns is what fits in it with
// the core in the process (4387), and it starts without the warning.
func TestMaxConnsFromNofile(t *testing.T) {
	bin := buildOrigin(t)
	front, core := testbed.FreeAddr(t, "127.0.0.1"), testbed.FreeAddr(t, "127.0.0.1")
	cfg := originYAML(t, front, core, "", nil, []string{
		fmt.Sprintf("listen: %q", core), "proxy_mode: 0", fmt.Sprintf("default_server: %q", testbed.EchoTCP(t))})
	p := testbed.StartNofile(t, 20000, bin, "--config", cfg)
	testbed.WaitOutput(t, p, 10*time.Second, `"msg":"front listening"`, `"max_conns":4387`)
	if strings.Contains(p.Output(), "needs more descriptors") {
		t.Errorf("a default start warned:\n%s", p.Output())
	}
}
