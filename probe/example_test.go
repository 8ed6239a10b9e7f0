package probe_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/probe"
	"github.com/go-ldap/ldap/v3"
)

// An agent keeps one LDAP session through the best edge. It dials with a
// probe.Dialer (the best reachable edge, else the plain hostname), runs a
// probe.Watcher beside the session, and on the watcher's event
// (better-edge, edge-left) closes the session cleanly and reconnects at
// once: an event is a planned end, not an error, so it never feeds the
// reconnect backoff. Only errors do.
//
// Every wait is bounded: the agent runs until SIGINT or SIGTERM ends its
// context; one dial costs at most a budget per edge and then the
// Dialer's connect timeout for the name, and each dial has its own
// deadline besides (dialTimeout), so a silent edge never hangs the agent.
func Example_agent() {
	conf, err := probe.ClientTLS("ca.pem", "agent.pem", "agent.key", "ldap.example.com")
	if err != nil {
		log.Fatal(err)
	}
	cfg := probe.DefaultConfig()
	cfg.Name = "ldap.example.com"
	cfg.State = "agent-edges.json"
	d, err := probe.NewDialer(cfg, conf)
	if err != nil {
		log.Fatal(err)
	}
	w, err := probe.NewWatcher(d)
	if err != nil {
		log.Fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	events := make(chan probe.Event)
	go w.Run(ctx, events)

	a := &agent{dialer: d, events: events, keepalive: 30 * time.Second, dialTimeout: time.Minute,
		bind: func(l *ldap.Conn) error { return l.ExternalBind() }}
	if err := a.run(ctx); !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// agent is the example's session loop.
type agent struct {
	dialer      *probe.Dialer
	events      <-chan probe.Event
	bind        func(*ldap.Conn) error
	keepalive   time.Duration // how often the session proves it is alive
	dialTimeout time.Duration // bound of one DialContext
	backoff     backoff

	// For the test: each session's edge, and each backoff wait.
	mu       sync.Mutex
	sessions []string
	ends     []string // the event's reason, or the error
	waits    []time.Duration
}

// planned ends a session on a watcher event; its text is the reason.
type planned struct{ reason string }

func (p planned) Error() string { return p.reason }

func (a *agent) run(ctx context.Context) error {
	for {
		err := a.session(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.mu.Lock()
		a.ends = append(a.ends, err.Error())
		a.mu.Unlock()
		if errors.As(err, new(planned)) {
			continue // a clean reconnect: no wait, the backoff untouched
		}
		wait := a.backoff.next()
		a.mu.Lock()
		a.waits = append(a.waits, wait)
		a.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// session dials, binds and keeps the session until an error or an event.
func (a *agent) session(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, a.dialTimeout)
	c, err := a.dialer.DialContext(dctx)
	cancel()
	if err != nil {
		return err
	}
	l := ldap.NewConn(c, true)
	l.Start()
	defer l.Close()
	if err := a.bind(l); err != nil {
		return err
	}
	a.backoff.reset() // a working session ends the bad streak
	a.mu.Lock()
	a.sessions = append(a.sessions, c.RemoteAddr().String())
	a.mu.Unlock()
	tick := time.NewTicker(a.keepalive)
	defer tick.Stop()
	for {
		select {
		case ev := <-a.events:
			// Any event moves the agent, unless it names this very edge
			// (a failover already brought the agent there); To "" is the
			// name.
			if ev.To != c.RemoteAddr().String() {
				l.Unbind()
				return planned{ev.Reason}
			}
		case <-tick.C:
			if _, err := l.WhoAmI(nil); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// backoff doubles from base to max on each error; reset after a session
// that worked.
type backoff struct {
	base, max time.Duration
	cur       time.Duration
}

func (b *backoff) next() time.Duration {
	if b.base == 0 {
		b.base, b.max = time.Second, time.Minute
	}
	if b.cur == 0 {
		b.cur = b.base
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}

func (b *backoff) reset() { b.cur = 0 }
