package core

import (
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
