package relayshell

import (
	"context"
	"testing"
	"time"
)

// TestAdmit checks admission against max_conns and after Shutdown: a
// slot released is free again, and a Shutdown with nothing admitted
// returns at once (nil) and admits nothing more.
func TestAdmit(t *testing.T) {
	var s Shell
	s.Init(nil, 2, nil, nil)
	for i, want := range []Admission{Admitted, Admitted, Full} {
		if got := s.Admit(); got != want {
			t.Fatalf("admission %d = %v, want %v", i, got, want)
		}
	}
	s.Release()
	if got := s.Admit(); got != Admitted {
		t.Fatalf("after a release: %v, want Admitted", got)
	}
	s.Release()
	s.Release()
	if n := s.Active(); n != 0 {
		t.Fatalf("active = %d after releasing all", n)
	}
	if err := s.Shutdown(context.Background(), NoTimeout, nil); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if got := s.Admit(); got != Closing || !s.Closing() {
		t.Fatalf("after Shutdown: %v (closing %v), want Closing", got, s.Closing())
	}
	if s.Context().Err() == nil {
		t.Fatal("context not cancelled by Shutdown")
	}
}

// TestShutdownWaitsForRelease: Shutdown returns once the last admitted
// connection is released, without cutting it (nil error, the context
// stays live until then).
func TestShutdownWaitsForRelease(t *testing.T) {
	var s Shell
	s.Init(nil, 1, nil, nil)
	if s.Admit() != Admitted {
		t.Fatal("not admitted")
	}
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background(), NoTimeout, nil) }()
	for !s.Closing() {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a connection admitted", err)
	default:
	}
	if s.Context().Err() != nil {
		t.Fatal("context cancelled before the drain ended")
	}
	s.Release()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
}

// TestKeepalive: a period gives idle and interval, 4 probes; 0 is off.
func TestKeepalive(t *testing.T) {
	if k := Keepalive(30 * time.Second); k.Idle != 30*time.Second || k.Interval != 30*time.Second || k.Count != 4 {
		t.Fatalf("Keepalive(30s) = %+v", k)
	}
	if k := Keepalive(0); k.Idle != 0 || k.Count != 0 {
		t.Fatalf("Keepalive(0) = %+v", k)
	}
}
