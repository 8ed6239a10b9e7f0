package core

import (
	"errors"
	"net"
	"strings"
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
		b := &backend{name: "L1", conn: core, rd: wire.NewReader(core), heard: new(progress), probe: true, probeAt: time.Now()}
		limit := 50 * time.Millisecond
		if err := b.boundFirst(limit); err != nil {
			t.Fatal(err)
		}
		if busy {
			b.heard.heard() // a PDU from L1 on another connection
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

// A silent server that owes answers to client requests is busy for
// busyLimit from when it began to owe or last spoke (more requests do not
// restart the clock), then frozen; owing nothing, silence is a failure.
func TestProgressOwedAnswers(t *testing.T) {
	var p progress
	mark := p.count()
	if p.busy(mark) {
		t.Fatal("silent, owing nothing: busy")
	}
	p.owe()
	if !p.busy(mark) {
		t.Fatal("silent, owing a request just sent: not busy")
	}
	old := time.Now().Add(-busyLimit - time.Second).UnixNano()
	p.quiet.Store(old)
	p.owe() // a second request does not restart the clock
	if p.quiet.Load() != old || p.busy(mark) {
		t.Fatalf("silent for more than %v while owing: busy %v", busyLimit, p.busy(mark))
	}
	p.heard()
	if !p.busy(p.count()-1) || !p.busy(p.count()) {
		t.Fatal("a PDU while owing two: not busy")
	}
	p.done()
	p.done()
	if p.busy(p.count()) {
		t.Fatal("owing nothing, nothing heard since the mark: busy")
	}
}

// A first-answer bound is renewed while the server is busy, but only for
// busyLimit from the sending of the core's search: a server that keeps
// serving other connections and never this one fails then, so that no
// session waits on it for ever.
func TestFirstAnswerRenewalBounded(t *testing.T) {
	core, server := net.Pipe()
	defer core.Close()
	defer server.Close()
	b := &backend{name: "L1", conn: core, rd: wire.NewReader(core), heard: new(progress), probe: true,
		probeAt: time.Now().Add(-busyLimit)} // sent busyLimit ago
	limit := 50 * time.Millisecond
	if err := b.boundFirst(limit); err != nil {
		t.Fatal(err)
	}
	b.heard.heard() // a PDU from L1 on another connection
	raw, err := b.rd.Next()
	_, err = b.answered(raw, err, limit)
	if err == nil || errors.Is(err, errStillBusy) || !strings.Contains(err.Error(), "busy all along") {
		t.Fatalf("busy past the limit: %v, want a failure saying the server was busy", err)
	}
}
