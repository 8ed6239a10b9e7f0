package probe_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
	"github.com/edgefleet/edgefleet/probe"
)

// TestProbeThroughEdge: one full probe through our edge, the front and
// the core (mTLS) to slapd succeeds with all three times from one socket.
func TestProbeThroughEdge(t *testing.T) {
	o := stack.Start(t)
	edge := o.Edge(t, "edge-1").Addr
	r := probe.Probe(context.Background(), edge, o.AgentTLS(), 5*time.Second)
	if !r.OK || r.Error != "" {
		t.Fatalf("probe through a working edge: %+v", r)
	}
	if r.Addr != edge || r.TCPConnectMS <= 0 || r.TLSHandshakeMS <= 0 || r.AppRTTMS <= 0 {
		t.Fatalf("want the address and three positive times, got %+v", r)
	}
	// The core saw the WhoAmI from the agent's certificate.
	if !strings.Contains(o.Logs.String(), `"agent":"agent"`) {
		t.Fatalf("the core logged no operation of agent \"agent\":\n%s", o.Logs.String())
	}
}

// TestProbeFailures: each way a probe fails says where, and none takes
// longer than its budget.
func TestProbeFailures(t *testing.T) {
	o := stack.Start(t)
	edge := o.Edge(t, "edge-1").Addr
	gone := stack.Start(t)
	orphan := gone.Edge(t, "edge-orphan").Addr
	gone.StopFront()

	rogue := o.AgentTLS()
	rogue.Certificates = []tls.Certificate{o.PKI.Rogue}
	rogue.MinVersion = tls.VersionTLS13
	wrongName := o.AgentTLS()
	wrongName.ServerName = "other.edgefleet.test"

	budget := 1500 * time.Millisecond
	for _, tc := range []struct {
		name, addr string
		conf       *tls.Config
		wantTCP    bool   // the TCP connect succeeded
		wantErr    string // in Result.Error
	}{
		// With TLS 1.3 the client's handshake completes before the server
		// has checked its certificate: only the LDAP round trip fails.
		{"rejected client certificate", edge, rogue, true, "ldap whoami"},
		{"certificate not for the name", edge, wrongName, true, "tls handshake"},
		// The edge accepts; its origin is gone, so it closes.
		{"origin gone", orphan, gone.AgentTLS(), true, "tls handshake"},
		{"refused", testbed.FreeAddr(t, "127.0.0.1"), o.AgentTLS(), false, "tcp connect"},
		{"black hole", testbed.BlackHole(t), o.AgentTLS(), false, "within the 1.5s budget"},
		{"silent", testbed.Silent(t), o.AgentTLS(), true, "within the 1.5s budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := probe.Probe(context.Background(), tc.addr, tc.conf, budget)
			took := time.Since(start)
			t.Logf("%v: %+v", took, r)
			if r.OK || !strings.Contains(r.Error, tc.wantErr) || !strings.Contains(r.Error, tc.addr) {
				t.Fatalf("want a failure naming %s and %q, got %+v", tc.addr, tc.wantErr, r)
			}
			if (r.TCPConnectMS > 0) != tc.wantTCP {
				t.Fatalf("tcp connect %v ms, want it done: %v (%+v)", r.TCPConnectMS, tc.wantTCP, r)
			}
			// The budget itself shows in the error ("within the 1.5s
			// budget"); the clock here only catches a probe that hangs.
			if took > 5*budget {
				t.Fatalf("the probe took %v: it hung (budget %v)", took, budget)
			}
		})
	}
}
