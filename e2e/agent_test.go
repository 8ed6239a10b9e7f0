package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/probe"
	"github.com/go-ldap/ldap/v3"
)

// agentEnv, set to an agentConfig in JSON, turns the test binary into the
// agent of TestEndToEnd: started inside the agent's namespace (its sockets,
// and the probe's, must belong there), it prints one record per line.
const agentEnv = "EDGEFLEET_E2E_AGENT"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(agentEnv); cfg != "" {
		os.Exit(runAgent(cfg))
	}
	testbed.Main(m)
}

// agentConfig is what the agent needs: the name and how to resolve it,
// the agent's certificate, and its pace.
type agentConfig struct {
	Name     string        `json:"name"`
	Port     int           `json:"port"`
	DNS      string        `json:"dns"`
	CA       string        `json:"ca"`
	Cert     string        `json:"cert"`
	Key      string        `json:"key"`
	State    string        `json:"state"`
	Every    time.Duration `json:"every"`    // one operation per Every, reads and writes in turn
	Interval time.Duration `json:"interval"` // the watcher's
	Max      time.Duration `json:"max"`      // the agent stops by itself after Max
	// OpTimeout bounds one LDAP operation (0: 10 s): a session whose
	// origin vanished without a RST ends after it.
	OpTimeout time.Duration `json:"op_timeout"`
	// Increments makes every other write a modify that increments
	// counterDN's mailPreferenceOption by one (RFC 4525) instead of an
	// add: a modify applied twice shows in the counter.
	Increments bool `json:"increments"`
}

// counterDN is the entry the agent's increments count on; counterLDIF
// makes it, at 0.
var (
	counterDN   = "cn=counter,ou=writes," + testbed.Suffix
	counterLDIF = "dn: " + counterDN + "\nobjectClass: person\nobjectClass: pilotPerson\ncn: counter\nsn: counter\nmailPreferenceOption: 0\n\n"
)

// record is one line of the agent: a session (the edge it dialed), an
// operation (read or write, its sequence number, the result), a move (the
// watcher's better-edge event), an error that ended a session, the end.
type record struct {
	Kind string    `json:"kind"` // session, read, write, increment, move, error, end
	Seq  int       `json:"seq,omitempty"`
	Edge string    `json:"edge,omitempty"` // the session's edge (ip:port); for a move, its target
	From string    `json:"from,omitempty"` // a move's origin
	DN   string    `json:"dn,omitempty"`   // a write's entry
	OK   bool      `json:"ok"`
	Err  string    `json:"err,omitempty"`
	At   time.Time `json:"at"` // when the agent wrote it
}

// errMoved ends a session on a better-edge event: a clean reconnect.
var errMoved = errors.New(probe.ReasonBetterEdge)

// runAgent keeps an LDAP session through the edge a probe.Dialer picks,
// with a probe.Watcher beside it, and issues a read (search for bob) and a
// write (add of a fresh entry under ou=writes; with Increments, every
// other one an increment of counterDN) in turn until stdin closes
// or Max passes. A better-edge event is a clean reconnect; an error ends
// the session and the agent dials again after 100 ms.
func runAgent(js string) int {
	var cfg agentConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 2
	}
	conf, err := probe.ClientTLS(cfg.CA, cfg.Cert, cfg.Key, cfg.Name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 2
	}
	pc := probe.DefaultConfig()
	pc.Name, pc.Port, pc.State, pc.Interval = cfg.Name, cfg.Port, cfg.State, cfg.Interval
	d := &probe.Dialer{Config: pc, TLS: conf, Resolver: probe.DNSResolver(cfg.DNS)}

	ctx, cancel := context.WithTimeout(context.Background(), cfg.Max)
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(r record) {
		mu.Lock()
		defer mu.Unlock()
		r.At = time.Now()
		enc.Encode(r)
	}
	events := make(chan probe.Event)
	watched := make(chan struct{})
	go func() { (&probe.Watcher{Dialer: d}).Run(ctx, events); close(watched) }()

	a := &agentSession{cfg: cfg, dialer: d, events: events, emit: emit}
	for ctx.Err() == nil {
		err := a.run(ctx)
		if ctx.Err() != nil {
			break
		}
		if !errors.Is(err, errMoved) {
			emit(record{Kind: "error", Err: err.Error()})
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
	<-watched
	emit(record{Kind: "end", OK: true})
	return 0
}

type agentSession struct {
	cfg    agentConfig
	dialer *probe.Dialer
	events <-chan probe.Event
	emit   func(record)
	seq    int
}

// run is one session: dial, bind as alice, operate until an event, an
// error or the end.
func (a *agentSession) run(ctx context.Context) error {
	c, err := a.dialer.DialContext(ctx)
	if err != nil {
		return err
	}
	edge := c.RemoteAddr().String()
	l := ldap.NewConn(c, true)
	l.SetTimeout(cmp.Or(a.cfg.OpTimeout, 10*time.Second))
	l.Start()
	defer l.Close()
	if err := l.Bind(testbed.User("alice"), "alice-pw"); err != nil {
		return fmt.Errorf("bind through %s: %w", edge, err)
	}
	a.emit(record{Kind: "session", Edge: edge, OK: true})
	tick := time.NewTicker(a.cfg.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			l.Unbind()
			return ctx.Err()
		case ev := <-a.events:
			a.emit(record{Kind: "move", From: ev.From, Edge: ev.To, OK: true})
			if ev.To != edge {
				l.Unbind()
				return errMoved
			}
		case <-tick.C:
			a.seq++
			r := record{Seq: a.seq, Edge: edge}
			var err error
			if a.seq%2 == 1 {
				r.Kind = "read"
				var res *ldap.SearchResult
				res, err = l.Search(ldap.NewSearchRequest("ou=people,"+testbed.Suffix, ldap.ScopeWholeSubtree,
					ldap.NeverDerefAliases, 0, 10, false, "(uid=bob)", []string{"cn"}, nil))
				switch {
				case err != nil:
					r.Err = err.Error()
				case len(res.Entries) != 1:
					r.Err = fmt.Sprintf("%d entries for uid=bob, want 1", len(res.Entries))
				default:
					r.OK = true
				}
			} else if a.cfg.Increments && a.seq%4 == 0 {
				r.Kind, r.DN = "increment", counterDN
				req := ldap.NewModifyRequest(counterDN, nil)
				req.Increment("mailPreferenceOption", "1")
				if err = l.Modify(req); err != nil {
					r.Err = err.Error()
				} else {
					r.OK = true
				}
			} else {
				r.Kind = "write"
				r.DN = fmt.Sprintf("cn=w-%d,ou=writes,%s", a.seq, testbed.Suffix)
				req := ldap.NewAddRequest(r.DN, nil)
				req.Attribute("objectClass", []string{"organizationalRole"})
				req.Attribute("cn", []string{fmt.Sprintf("w-%d", a.seq)})
				if err = l.Add(req); err != nil {
					r.Err = err.Error()
				} else {
					r.OK = true
				}
			}
			a.emit(r)
			if err != nil && ldap.IsErrorWithCode(err, ldap.ErrorNetwork) {
				return err
			}
		}
	}
}
