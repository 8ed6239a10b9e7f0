package probe_test

import (
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
	"github.com/edgefleet/edgefleet/probe"
)

// Short names for the test fleet's kinds.
const (
	kindEdge    = stack.KindEdge
	kindSlow    = stack.KindSlow
	kindRefused = stack.KindRefused
	kindHole    = stack.KindHole
	kindOrphan  = stack.KindOrphan
	slowRTT     = stack.SlowRTT
)

// fleet is stack.Fleet with the agent's side.
type fleet struct {
	*stack.Fleet
	o     *stack.Origin
	named *testbed.Named
	addrs []string
	edges map[string]*stack.Edge
}

func newFleet(t *testing.T, kinds ...stack.Kind) *fleet {
	t.Helper()
	f := stack.NewFleet(t, kinds...)
	return &fleet{Fleet: f, o: f.Origin, named: f.Named, addrs: f.Addrs, edges: f.Edges}
}

// config is the agent's configuration for the fleet's name.
func (f *fleet) config(t *testing.T) probe.Config {
	cfg := probe.DefaultConfig()
	cfg.Name = testbed.ServerName
	cfg.Port = f.Port
	cfg.Budget = 1500 * time.Millisecond
	cfg.State = t.TempDir() + "/state.json"
	return cfg
}

// dialer is an agent's Dialer on the fleet, resolving through named.
func (f *fleet) dialer(cfg probe.Config) *probe.Dialer {
	return &probe.Dialer{Config: cfg, TLS: f.o.AgentTLS(), Resolver: probe.DNSResolver(f.named.Addr)}
}

func (f *fleet) restartEdge(t *testing.T, addr string) { f.RestartEdge(t, addr) }
