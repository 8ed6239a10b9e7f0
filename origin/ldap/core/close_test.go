package core_test

import (
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/wire"
)

// activeConns reads edgefleet_core_connections_active from the harness's
// registry.
func activeConns(t *testing.T, h *harness) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "edgefleet_core_connections_active" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// A client that gives up while its operation waits on a server that never
// answers (a frozen slapd: the kernel accepts, the process does not read)
// ends its session: the core notices the client's close and releases the
// client and backend connections and their goroutines. Established backend
// I/O has no timeout (DESIGN.md §4), so nothing else would.
func TestClientClosesWhileServerHangs(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), nil)
	sl[0].Freeze()
	t.Cleanup(sl[0].Kill)
	for _, tc := range []struct {
		name string
		pdu  []byte
	}{
		{"bind", wire.BindRequest(1, alice, []byte("alice-pw"))},
		{"search", searchPDU(1, testbed.Suffix)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dials := h.dialCount(sl[0].Addr)
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			c.Write(tc.pdu)
			waitFor(t, "the core to dial L1", func() bool { return h.dialCount(sl[0].Addr) > dials })
			waitFor(t, "the session to start", func() bool { return activeConns(t, h) == 1 })
			c.Close()
			waitFor(t, "the session to end after the client closed", func() bool { return activeConns(t, h) == 0 })
			// The operation left unanswered is logged all the same.
			var lines []string
			for _, l := range h.logs.lines("ldap op") {
				if l["op"] == tc.name {
					lines = append(lines, fmt.Sprint(l["target"], " ", l["result"]))
				}
			}
			if !slices.Equal(lines, []string{"L1 unanswered"}) {
				t.Errorf("%s lines: %q, want [\"L1 unanswered\"]", tc.name, lines)
			}
		})
	}
}
