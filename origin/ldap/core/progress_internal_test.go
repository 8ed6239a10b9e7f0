package core

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/ldap/wire"
)

// A fresh connection's first-answer bound that expires while the server
// was heard from on other connections is renewed (errStillBusy), and the
// root DSE answer that finally comes is swallowed; one that expires with
// nothing heard is a failure. net.Pipe stands in for the server socket:
// this is the bookkeeping of answered alone.
func TestFirstAnswerRenewedWhileServerBusy(t *testing.T) {
	for _, busy := range []bool{true, false} {
		core, server := net.Pipe()
		defer core.Close()
		defer server.Close()
		b := &backend{name: "L1", conn: core, rd: wire.NewReader(core), heard: new(atomic.Uint64), probe: true}
		limit := 50 * time.Millisecond
		if err := b.boundFirst(limit); err != nil {
			t.Fatal(err)
		}
		if busy {
			b.heard.Add(1) // a PDU from L1 on another connection
		}
		raw, err := b.rd.Next()
		_, err = b.answered(raw, err, limit)
		if !busy {
			if err == nil || errors.Is(err, errStillBusy) {
				t.Fatalf("nothing heard: %v, want a failure", err)
			}
			continue
		}
		if !errors.Is(err, errStillBusy) {
			t.Fatalf("server busy: %v, want the bound renewed", err)
		}
		if b.firstBy.IsZero() {
			t.Fatal("no bound after renewal")
		}
		core.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard, not part of what is tested
		go server.Write(wire.Result(rebindID, wire.TagSearchResultDone, 0, "", ""))
		raw, err = b.rd.Next()
		skip, err := b.answered(raw, err, limit)
		if err != nil || !skip || b.probe || !b.firstBy.IsZero() {
			t.Fatalf("the probe's answer after renewal: skip %v, err %v, probe %v, bound %v", skip, err, b.probe, b.firstBy)
		}
	}
}
