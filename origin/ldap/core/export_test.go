package core

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// SetBusyLimit shortens how long a silent server that owes answers counts
// as busy (progress.go) for the duration of t.
func SetBusyLimit(t testing.TB, d time.Duration) {
	old := busyLimit
	busyLimit = d
	t.Cleanup(func() { busyLimit = old })
}

// Owing is how many client requests server name owes answers to
// (progress.go).
func Owing(s *Server, name string) int64 { return s.heard.of(name).owing.Load() }

// HoldHandshakeSlots takes n of the gate's slots as n full handshakes in
// flight would (the slots must be free); release gives them back one by
// one, each to the waiter whose turn it is.
func HoldHandshakeSlots(s *Server, n int) (release func()) {
	var rel []func()
	for range n {
		r, ok := s.gate.acquire("test-hold")
		if !ok {
			panic("HoldHandshakeSlots: no free slot")
		}
		rel = append(rel, r)
	}
	return func() {
		for _, r := range rel {
			r()
		}
	}
}

// TraceHandshakes records the gate's events from now on, "queued <edge>"
// and "granted <edge>" in the order they happened; events returns them.
func TraceHandshakes(s *Server) (events func() []string) {
	var mu sync.Mutex
	var ev []string
	s.gate.mu.Lock()
	s.gate.trace = func(event, edge string) {
		mu.Lock()
		ev = append(ev, event+" "+edge)
		mu.Unlock()
	}
	s.gate.mu.Unlock()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ev)
	}
}

// ClientHello is the first record a Go client sends (clientHello).
var ClientHello = clientHello
