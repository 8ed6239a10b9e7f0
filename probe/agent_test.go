package probe_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/probe"
	"github.com/go-ldap/ldap/v3"
)

// TestExampleAgent runs the example agent against the real stack: it
// binds through the near edge; the edge goes away, the session fails, the
// agent waits its backoff once and fails over to the far edge; the near
// edge comes back, the watcher sees two good probes in a row and sends
// better-edge; the agent moves back at once, without a backoff wait.
func TestExampleAgent(t *testing.T) {
	f := newFleet(t, kindEdge, kindSlow)
	near, far := f.addrs[0], f.addrs[1]
	d := f.dialer(f.config(t))
	d.Config.Interval = 100 * time.Millisecond

	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan probe.Event)
	w := &probe.Watcher{Dialer: d}
	watched := make(chan error, 1)
	go func() { watched <- w.Run(ctx, events) }()
	a := &agent{dialer: d, events: events, keepalive: 50 * time.Millisecond, dialTimeout: 30 * time.Second,
		backoff: backoff{base: 20 * time.Millisecond, max: time.Second},
		bind:    func(l *ldap.Conn) error { return l.Bind(testbed.User("alice"), "alice-pw") }}
	done := make(chan error, 1)
	go func() { done <- a.run(ctx) }()
	defer func() {
		cancel()
		<-done
		<-watched
	}()

	sessions := func() []string {
		a.mu.Lock()
		defer a.mu.Unlock()
		return slices.Clone(a.sessions)
	}
	waitFor := func(what string, want []string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !slices.Equal(sessions(), want); {
			if time.Now().After(deadline) {
				a.mu.Lock()
				defer a.mu.Unlock()
				t.Fatalf("%s: sessions %v (ends %v), want %v", what, a.sessions, a.ends, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("first session", []string{near})
	f.edges[near].Stop()
	waitFor("failover", []string{near, far})
	f.restartEdge(t, near)
	waitFor("back to the near edge", []string{near, far, near})

	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ends) != 2 || a.ends[1] != probe.ReasonBetterEdge {
		t.Fatalf("sessions ended by %v, want an error then %s", a.ends, probe.ReasonBetterEdge)
	}
	if len(a.waits) != 1 {
		t.Fatalf("backoff waits %v (ends %v): want exactly one, for the error, none for better-edge", a.waits, a.ends)
	}
}
