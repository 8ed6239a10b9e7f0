package probe_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
	"github.com/edgefleet/edgefleet/probe"
)

// onMessage is a slog.Handler that runs fn on each record whose message
// is msg, from the logging goroutine, and drops every record: a test's
// hook into a decision point of the code under test.
type onMessage struct {
	msg string
	fn  func(slog.Record)
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.fn(r)
	}
	return nil
}
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onMessage) WithGroup(string) slog.Handler      { return h }

// TestFailoverRacesWatcherRound: the chosen edge is down; while
// DialContext moves on from it, a watcher round runs (deterministically:
// from the dialer's own "edge unreachable" line) on a set from which the
// failover target was just removed in the real named. The dial follows
// the ranking in use, so it connects to the edge that ranking puts next,
// never to the one that left; the state file stays readable with that
// edge chosen; and a restarted agent uses it without measuring.
func TestFailoverRacesWatcherRound(t *testing.T) {
	f := newFleet(t, kindEdge, kindSlow, kindSlow)
	near := f.addrs[0]
	cfg := f.config(t)
	d := f.dialer(cfg)
	ctx := context.Background()
	r := d.Rank(ctx)
	if r.Chosen != near || !r.Ranking[1].OK || !r.Ranking[2].OK {
		t.Fatalf("ranked %+v, want %s chosen, two far edges answering", r, near)
	}
	target, other := r.Ranking[1].Addr, r.Ranking[2].Addr // where a failover goes first, second
	w := &probe.Watcher{Dialer: d}
	var once sync.Once
	d.Log = slog.New(onMessage{"edge unreachable", func(slog.Record) {
		once.Do(func() {
			f.Unpublish(t, target)
			w.Round(ctx)
		})
	}})
	f.edges[near].Stop()
	c, err := d.DialContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if c.RemoteAddr().String() != other {
		t.Fatalf("dialed %s, want %s (%s left the set during the dial)", c.RemoteAddr(), other, target)
	}
	st, err := probe.LoadState(cfg.State)
	if err != nil {
		t.Fatalf("the state file after the race: %v", err)
	}
	if st.Chosen != other || len(st.Addresses) != 2 || d.Current().Chosen != other {
		t.Fatalf("state %+v, in use %q: want %s chosen in the set of two", st, d.Current().Chosen, other)
	}
	restarted := f.dialer(cfg)
	if r := restarted.Select(ctx); r.Chosen != other || !r.MeasuredAt.Equal(st.MeasuredAt) {
		t.Fatalf("a restarted agent selected %+v, want the state file's %s", r, other)
	}
}

// TestDialDNSFailureAsksOnce: when the name does not resolve, DialContext
// asks the resolver exactly as often as a plain dial of the name (counted
// by a UDP relay in front of the real named), not once for the ranking
// and again for the name, which doubled a resolver timeout; and it
// returns the plain dial's error.
func TestDialDNSFailureAsksOnce(t *testing.T) {
	f := newFleet(t, kindEdge, kindEdge)
	relay := testbed.StartUDPRelay(t, f.named.Addr)
	resolver := probe.DNSResolver(relay.Addr)
	cfg := f.config(t)
	cfg.Name = "nowhere." + stack.Zone
	ctx := context.Background()

	td := tls.Dialer{NetDialer: &net.Dialer{Resolver: resolver}, Config: f.o.AgentTLS()}
	_, plainErr := td.DialContext(ctx, "tcp", net.JoinHostPort(cfg.Name, strconv.Itoa(cfg.Port)))
	plain := relay.Queries()
	if plainErr == nil || plain == 0 {
		t.Fatalf("plain dial of an unknown name: %v after %d queries", plainErr, plain)
	}

	d := &probe.Dialer{Config: cfg, TLS: f.o.AgentTLS(), Resolver: resolver}
	_, err := d.DialContext(ctx)
	if got := relay.Queries() - plain; got != plain {
		t.Fatalf("DialContext sent %d DNS queries, the plain dial %d", got, plain)
	}
	var dnsErr *net.DNSError
	if err == nil || !errors.As(err, &dnsErr) || !dnsErr.IsNotFound || !strings.HasSuffix(err.Error(), plainErr.Error()) {
		t.Fatalf("DialContext: %v, want the plain dial's %q", err, plainErr)
	}
}

// TestDialNameAsksOnce: in the paths without a choice that dial the name
// (one address; a corrupt state file), DialContext asks the resolver as
// often as a plain dial of the name (counted by a UDP relay in front of
// the real named), and connects. It walks the addresses it resolved to
// choose instead of resolving the name again: a resolver that times out
// on AAAA queries cost its timeout twice (20 s, not 10 s), and the second
// time inside connect_timeout, so the dial failed where the plain dial
// connected.
func TestDialNameAsksOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kinds []stack.Kind
		state string
	}{
		{"one address", []stack.Kind{kindEdge}, ""},
		{"corrupt state", []stack.Kind{kindEdge, kindEdge}, `{"name": `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, tc.kinds...)
			relay := testbed.StartUDPRelay(t, f.named.Addr)
			resolver := probe.DNSResolver(relay.Addr)
			cfg := f.config(t)
			if tc.state != "" {
				cfg.State = testbed.WriteFile(t, t.TempDir(), "state.json", tc.state)
			}
			ctx := context.Background()
			td := tls.Dialer{NetDialer: &net.Dialer{Resolver: resolver}, Config: f.o.AgentTLS()}
			c, err := td.DialContext(ctx, "tcp", net.JoinHostPort(cfg.Name, strconv.Itoa(cfg.Port)))
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			plain := relay.Queries()

			d := &probe.Dialer{Config: cfg, TLS: f.o.AgentTLS(), Resolver: resolver}
			c, err = d.DialContext(ctx)
			if err != nil {
				t.Fatalf("DialContext: %v", err)
			}
			defer c.Close()
			if got := relay.Queries() - plain; got != plain {
				t.Fatalf("DialContext sent %d DNS queries, the plain dial %d", got, plain)
			}
			if r := d.Current(); r.Chosen != "" || !slices.Contains(f.addrs, c.RemoteAddr().String()) {
				t.Fatalf("connected to %s with %+v in use, want no choice and one of %v", c.RemoteAddr(), r, f.addrs)
			}
		})
	}
}

// TestDialNameBounded: the name's two addresses accept TCP and stay
// silent, and the state file is corrupt, so there is no choice and the
// agent dials the name. That dial ends within the Dialer's connect
// timeout with a timeout error even though the caller's context has no
// deadline (before, it hung for ever). The test asserts the kind of
// error, not how long it took; the guard only catches a hang.
func TestDialNameBounded(t *testing.T) {
	ips := []string{"127.0.0.2", "127.0.0.3"}
	port, err := stack.SharedPort(ips)
	if err != nil {
		t.Fatal(err)
	}
	var records []string
	for _, ip := range ips {
		testbed.SilentAt(t, net.JoinHostPort(ip, strconv.Itoa(port)))
		records = append(records, "ldap 60 IN A "+ip)
	}
	named := testbed.StartNamed(t, testbed.NamedConfig{Zone: stack.Zone, Records: records})
	cfg := probe.DefaultConfig()
	cfg.Name, cfg.Port = "ldap."+stack.Zone, port
	cfg.State = testbed.WriteFile(t, t.TempDir(), "state.json", `{"name": `)
	cfg.ConnectTimeout = 300 * time.Millisecond
	d, err := probe.NewDialer(cfg, &tls.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.Resolver = probe.DNSResolver(named.Addr)
	done := make(chan error, 1)
	go func() {
		c, err := d.DialContext(context.Background())
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		var ne net.Error
		if err == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()) || !strings.Contains(err.Error(), "dial "+cfg.Name) {
			t.Fatalf("dial of a silent name: %v, want a timeout of the name's dial", err)
		}
		if r := d.Current(); r.Chosen != "" || !strings.Contains(r.NoChoice, "corrupt") {
			t.Fatalf("ranking in use %+v, want no choice (corrupt state)", r)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("DialContext of a silent name still running after 2 min: unbounded")
	}
}

// TestDialerZeroBudget: a Dialer built without NewDialer, its budget
// left 0, dials its edges with the default budget (as the probes do),
// rather than failing every edge at once and falling back to the name.
func TestDialerZeroBudget(t *testing.T) {
	f := newFleet(t, kindEdge, kindEdge)
	var logs bytes.Buffer
	var mu sync.Mutex
	d := &probe.Dialer{Config: probe.Config{Name: testbed.ServerName, Port: f.Port}, TLS: f.o.AgentTLS(),
		Resolver: probe.DNSResolver(f.named.Addr),
		Log:      slog.New(slog.NewTextHandler(&lockedWriter{&mu, &logs}, nil))}
	c, err := d.DialContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mu.Lock()
	defer mu.Unlock()
	if cur := d.Current(); c.RemoteAddr().String() != cur.Chosen || strings.Contains(logs.String(), "edge unreachable") {
		t.Fatalf("dialed %s, chosen %q; logs:\n%s\nwant the chosen edge, none unreachable", c.RemoteAddr(), cur.Chosen, logs.String())
	}
	if d.Config.Budget != probe.DefaultBudget || d.Config.ConnectTimeout != probe.DefaultConnectTimeout {
		t.Fatalf("config in use %+v, want the default budget and connect timeout", d.Config)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestNewDialer: the constructors give zero fields their defaults and
// refuse a bad value with its key; a Watcher needs a Dialer.
func TestNewDialer(t *testing.T) {
	d, err := probe.NewDialer(probe.Config{Name: "ldap.example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := probe.DefaultConfig()
	want.Name = "ldap.example.com"
	want.MinGain, want.MinGainRatio = 0, 0 // zero is a value for these: no threshold
	if d.Config != want {
		t.Fatalf("NewDialer defaults: %+v, want %+v", d.Config, want)
	}
	for _, tc := range []struct {
		cfg  probe.Config
		want string
	}{
		{probe.Config{}, "probe config: name: required (the hostname whose addresses are the edges)"},
		{probe.Config{Name: "n", Interval: -time.Second}, "probe config: interval: -1s must be positive"},
		{probe.Config{Name: "n", Budget: -time.Second}, "probe config: budget: -1s must be positive"},
		{probe.Config{Name: "n", Stale: -time.Second}, "probe config: stale: -1s must be positive"},
		{probe.Config{Name: "n", ConnectTimeout: -time.Second}, "probe config: connect_timeout: -1s must be positive"},
		{probe.Config{Name: "n", Streak: -1}, "probe config: streak: -1 must be at least 1"},
		{probe.Config{Name: "n", Port: 70000}, "probe config: port: 70000 is not a TCP port"},
	} {
		if _, err := probe.NewDialer(tc.cfg, nil); err == nil || err.Error() != tc.want {
			t.Errorf("NewDialer(%+v): %v, want %q", tc.cfg, err, tc.want)
		}
		if _, err := probe.NewWatcher(&probe.Dialer{Config: tc.cfg}); err == nil || err.Error() != tc.want {
			t.Errorf("NewWatcher on %+v: %v, want %q", tc.cfg, err, tc.want)
		}
		if _, err := probe.NewMonitor(tc.cfg, nil, nil); err == nil || err.Error() != tc.want {
			t.Errorf("NewMonitor(%+v): %v, want %q", tc.cfg, err, tc.want)
		}
		bad := &probe.Dialer{Config: tc.cfg}
		if _, err := bad.DialContext(context.Background()); err == nil || err.Error() != tc.want {
			t.Errorf("DialContext on %+v: %v, want %q", tc.cfg, err, tc.want)
		}
		if err := (&probe.Watcher{Dialer: bad}).Run(context.Background(), nil); err == nil || err.Error() != tc.want {
			t.Errorf("Run on %+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := probe.NewWatcher(nil); err == nil {
		t.Error("NewWatcher(nil) accepted")
	}
	if _, err := os.Stat("agent-edges.json"); err == nil {
		t.Error("a test wrote the example's state file in the package directory")
	}
}
