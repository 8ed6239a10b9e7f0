package probe_test

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
	"github.com/edgefleet/edgefleet/probe"
)

// What stands at one address of a test fleet's A set.
const (
	kindEdge    = "edge"    // our edge in front of the origin
	kindSlow    = "slow"    // our edge behind a relay adding 40 ms per round trip
	kindRefused = "refused" // nothing listens
	kindHole    = "hole"    // SYNs go unanswered
	kindOrphan  = "orphan"  // our edge whose origin is gone
)

// fleet is a name served by a real BIND 9 whose A set is our edges (and
// the failures asked for) on 127.0.0.2, .3, … sharing one port, in front
// of a real origin (front, core with mTLS, slapd).
type fleet struct {
	o     *stack.Origin
	named *testbed.Named
	port  int
	addrs []string               // ip:port, in the order asked
	edges map[string]*stack.Edge // by ip:port, the kinds edge and orphan
}

// slowRTT is what the delaying relay adds to each round trip.
const slowRTT = 40 * time.Millisecond

func newFleet(t *testing.T, kinds ...string) *fleet {
	t.Helper()
	f := &fleet{o: stack.Start(t), edges: map[string]*stack.Edge{}}
	var gone *stack.Origin
	port, err := sharedPort(len(kinds))
	if err != nil {
		t.Fatal(err)
	}
	f.port = port
	var records []string
	for i, kind := range kinds {
		ip := fmt.Sprintf("127.0.0.%d", i+2)
		addr := net.JoinHostPort(ip, strconv.Itoa(port))
		records = append(records, "ldap 60 IN A "+ip)
		f.addrs = append(f.addrs, addr)
		switch kind {
		case kindEdge:
			f.edges[addr] = f.o.EdgeAt(t, "edge-"+ip, addr)
		case kindSlow:
			testbed.DelayAt(t, addr, f.o.Edge(t, "edge-far").Addr, slowRTT)
		case kindRefused:
		case kindHole:
			testbed.BlackHoleAt(t, addr)
		case kindOrphan:
			if gone == nil {
				gone = stack.Start(t)
				gone.StopFront()
			}
			f.edges[addr] = gone.EdgeAt(t, "edge-orphan-"+ip, addr)
		default:
			t.Fatalf("unknown kind %q", kind)
		}
	}
	f.named = testbed.StartNamed(t, testbed.NamedConfig{Zone: "edgefleet.test", Records: records})
	return f
}

// sharedPort finds a port free on 127.0.0.2 … 127.0.0.(n+1), below the
// ephemeral range.
func sharedPort(n int) (int, error) {
	for range 50 {
		port, err := testbed.LowPort("127.0.0.2")
		if err != nil {
			return 0, err
		}
		free := true
		for i := range n {
			ln, err := net.Listen("tcp", net.JoinHostPort(fmt.Sprintf("127.0.0.%d", i+2), strconv.Itoa(port)))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no port free on 127.0.0.2-%d", n+1)
}

// config is the agent's configuration for the fleet's name.
func (f *fleet) config(t *testing.T) probe.Config {
	cfg := probe.DefaultConfig()
	cfg.Name = testbed.ServerName
	cfg.Port = f.port
	cfg.Budget = 1500 * time.Millisecond
	cfg.State = t.TempDir() + "/state.json"
	return cfg
}

// dialer is an agent's Dialer on the fleet, resolving through named.
func (f *fleet) dialer(cfg probe.Config) *probe.Dialer {
	return &probe.Dialer{Config: cfg, TLS: f.o.AgentTLS(), Resolver: probe.DNSResolver(f.named.Addr)}
}

// restartEdge brings a stopped edge back on its address.
func (f *fleet) restartEdge(t *testing.T, addr string) {
	t.Helper()
	f.edges[addr] = f.o.EdgeAt(t, f.edges[addr].Name, addr)
}
