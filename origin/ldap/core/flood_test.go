package core_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/edgefleet/edgefleet/relay"
	"github.com/go-ldap/ldap/v3"
	"github.com/prometheus/client_golang/prometheus"
)

// The two edges of a flood test: the front measures each by its source.
const (
	floodEdge = "127.0.0.2" // the flooded one
	agentEdge = "127.0.0.3" // the agents' one
)

// tlsStack is slapd ◀─ core (mtls, agent pinned) ◀─ real front ◀─ two
// real edges with PROXY v2, sourced from floodEdge and agentEdge.
type tlsStack struct {
	h     *harness
	pki   *pki
	edges map[string]string // edge source → the edge's listening address
	tls12 bool              // dial with TLS 1.2 at most
}

func newTLSStack(t *testing.T, mod func(*core.Config)) *tlsStack {
	t.Helper()
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	p := newPKI(t)
	pins := pinsFor(t, p.agent, "agent-1")
	h := newHarness(t, dlpFile(3, 60, []server{{"L1", sl[0].Addr, false}}, proxy(nil, []string{"L1"})), func(c *core.Config) {
		c.TLSMode, c.TLS, c.Pins = core.TLSMTLS, &tls.Config{Certificates: []tls.Certificate{p.server}}, pins
		// Hang guards only: the slots decide, not the machine's speed.
		c.HandshakeTimeout, c.HandshakeQueueTimeout = 5*time.Minute, 5*time.Minute
		if mod != nil {
			mod(c)
		}
	})
	front := h.front(t)
	st := &tlsStack{h: h, pki: p, edges: map[string]string{}}
	for _, src := range []string{floodEdge, agentEdge} {
		cfg := relay.DefaultConfig()
		cfg.Name, cfg.Origins, cfg.Source = "edge-"+src, relay.OriginList(front), src
		// The floods here come from one address, to load the core's
		// queue: the edge's own admission (docs/edge.md) would stop them.
		cfg.Limits = relay.Limits{}
		e, err := relay.New(cfg, slog.New(slog.NewJSONHandler(h.logs, nil)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		ln := listen(t, src+":0")
		serve(t, e, ln)
		st.edges[src] = ln.Addr().String()
	}
	return st
}

// dial completes a TLS handshake through the edge sourced from edge, with
// cert (none when nil) and cache, and reads the root DSE over it when read
// is set (a refused certificate shows there in TLS 1.3; the read also
// takes the session tickets in).
func (st *tlsStack) dial(edge string, cert *tls.Certificate, cache tls.ClientSessionCache, read bool) (resumed bool, err error) {
	c, err := net.DialTimeout("tcp", st.edges[edge], time.Minute)
	if err != nil {
		return false, err
	}
	defer c.Close()
	cfg := &tls.Config{RootCAs: st.pki.pool, ServerName: "127.0.0.1", ClientSessionCache: cache}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	if st.tls12 {
		cfg.MaxVersion = tls.VersionTLS12
	}
	tc := tls.Client(c, cfg)
	tc.SetDeadline(time.Now().Add(5 * time.Minute)) // a hang guard
	if err := tc.Handshake(); err != nil {
		return false, err
	}
	resumed = tc.ConnectionState().DidResume
	if !read {
		return resumed, nil
	}
	l := ldap.NewConn(tc, true)
	l.Start()
	defer l.Close()
	l.SetTimeout(time.Minute)
	_, err = l.Search(ldap.NewSearchRequest("", ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
		"(objectClass=*)", []string{"namingContexts"}, nil))
	return resumed, err
}

// value is the sum of the series of name whose labels include want.
func (st *tlsStack) value(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	sum := 0.0
	for _, s := range st.h.series(t, name) {
		ok := true
		for k, v := range want {
			ok = ok && s.labels[k] == v
		}
		if ok {
			sum += s.value
		}
	}
	return sum
}

func (st *tlsStack) waitQueued(t *testing.T, edge string, n int) {
	t.Helper()
	waitWithin(t, 5*time.Minute, fmt.Sprintf("%d handshakes queued for edge %s", n, edge), func() bool {
		return st.value(t, "edgefleet_core_handshakes_queued", map[string]string{"edge": edge}) == float64(n)
	})
}

func (st *tlsStack) handshakes(t *testing.T, kind, result string) int {
	return int(st.value(t, "edgefleet_core_handshakes_total", map[string]string{"kind": kind, "result": result}))
}

// waitHandshakes waits until the core has counted n handshakes of kind
// and result: a client may see the end of a handshake (the server's
// Finished, or its alert) before the core has counted it.
func (st *tlsStack) waitHandshakes(t *testing.T, kind, result string, n int) {
	t.Helper()
	waitWithin(t, 5*time.Minute, fmt.Sprintf("%d %s handshakes counted %s", n, kind, result), func() bool {
		return st.handshakes(t, kind, result) >= n
	})
	if got := st.handshakes(t, kind, result); got != n {
		t.Errorf("%s handshakes %s = %d, want %d", kind, result, got, n)
	}
}

// TestHandshakesFairAcrossEdges: one handshake slot, held while 16
// flooders through one edge queue their full handshakes, 64 in all
// (clients without a certificate, as an attacker's). An agent through the
// other edge then makes 4 full handshakes one after another, each with a
// search. Fairness is read from the gate's own order of events, not from
// time: once the agent's handshake is queued, at most one flood handshake
// is granted before it (the other edge's turn), whatever the machine's
// speed. Every handshake is served and counted.
func TestHandshakesFairAcrossEdges(t *testing.T) {
	st := newTLSStack(t, func(c *core.Config) { c.HandshakeSlots = 1 })
	events := core.TraceHandshakes(st.h.srv)
	release := core.HoldHandshakeSlots(st.h.srv, 1)

	const flooders, each, agentConns = 16, 4, 4
	var wg sync.WaitGroup
	for range flooders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				st.dial(floodEdge, nil, nil, false) // refused at the client's certificate: the slot was spent anyway
			}
		}()
	}
	st.waitQueued(t, floodEdge, flooders)
	agentErr := make(chan error, 1)
	go func() {
		for i := range agentConns {
			if _, err := st.dial(agentEdge, &st.pki.agent, nil, true); err != nil {
				agentErr <- fmt.Errorf("agent connection %d: %w", i, err)
				return
			}
		}
		agentErr <- nil
	}()
	st.waitQueued(t, agentEdge, 1)
	release()
	if err := <-agentErr; err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	ev := events()
	queuedAgent, floodQueued := 0, 0
	waiting, before := false, 0
	for _, e := range ev {
		switch e {
		case "queued " + floodEdge:
			floodQueued++
		case "queued " + agentEdge:
			queuedAgent++
			waiting, before = true, 0
		case "granted " + floodEdge:
			if waiting {
				before++
			}
		case "granted " + agentEdge:
			if waiting && before > 1 {
				t.Errorf("%d flood handshakes were granted while the agent's waited; want at most 1 (round robin)", before)
			}
			waiting = false
		}
	}
	t.Logf("agent handshakes queued %d of %d, flood handshakes queued %d of %d", queuedAgent, agentConns, floodQueued, flooders*each)
	if queuedAgent == 0 || floodQueued < flooders {
		t.Fatalf("the queue was never under pressure (agent queued %d, flood queued %d): the test proves nothing\n%v", queuedAgent, floodQueued, ev)
	}
	st.waitHandshakes(t, "full", "ok", agentConns)
	st.waitHandshakes(t, "full", "failed", flooders*each)
	if got := st.handshakes(t, "full", "queue_timeout"); got != 0 {
		t.Errorf("queue_timeout = %d, want 0", got)
	}
	if st.value(t, "edgefleet_core_handshakes_queued", nil) != 0 {
		t.Error("handshakes still counted as queued after every one was served")
	}
}

// TestResumedHandshakeSkipsQueue: with the only handshake slot held and
// full handshakes through the flooded edge queued behind it, an agent that
// holds a session ticket resumes at once — Go crypto/tls (TLS 1.3 and
// 1.2) and openssl s_client -sess_in alike — and its search is answered,
// while its full handshake would have waited.
func TestResumedHandshakeSkipsQueue(t *testing.T) {
	testbed.Need(t, "openssl")
	st := newTLSStack(t, func(c *core.Config) { c.HandshakeSlots = 1 })
	cache, cache12 := tls.NewLRUClientSessionCache(4), tls.NewLRUClientSessionCache(4)
	if _, err := st.dial(agentEdge, &st.pki.agent, cache, true); err != nil {
		t.Fatal(err)
	}
	st.tls12 = true
	if _, err := st.dial(agentEdge, &st.pki.agent, cache12, true); err != nil {
		t.Fatal(err)
	}
	st.tls12 = false
	sess := filepath.Join(t.TempDir(), "agent.sess")
	if out, err := st.sClient(t, agentEdge, "agent", "-sess_out", sess); err != nil {
		t.Fatalf("openssl s_client -sess_out: %v\n%s", err, out)
	}

	events := core.TraceHandshakes(st.h.srv)
	release := core.HoldHandshakeSlots(st.h.srv, 1)
	done := make(chan struct{})
	for range 4 {
		go func() { st.dial(floodEdge, nil, nil, false); done <- struct{}{} }()
	}
	st.waitQueued(t, floodEdge, 4)
	resumed, err := st.dial(agentEdge, &st.pki.agent, cache, true)
	if err != nil || !resumed {
		t.Fatalf("the agent's ticket while the slot is held: resumed %v, err %v", resumed, err)
	}
	if out, err := st.sClient(t, agentEdge, "agent", "-sess_in", sess); err != nil || !strings.Contains(out, "Reused, TLSv1.3") {
		t.Fatalf("openssl s_client -sess_in while the slot is held: %v\n%s", err, out)
	}
	st.tls12 = true // the session_ticket extension's ticket, not a PSK
	if resumed, err := st.dial(agentEdge, &st.pki.agent, cache12, true); err != nil || !resumed {
		t.Fatalf("the agent's TLS 1.2 ticket while the slot is held: resumed %v, err %v", resumed, err)
	}
	st.tls12 = false
	st.waitHandshakes(t, "resumed", "ok", 3)
	for _, e := range events() {
		if strings.HasSuffix(e, " "+agentEdge) {
			t.Errorf("a resumed handshake passed the gate: %s", e)
		}
	}
	release()
	for range 4 {
		<-done
	}
}

// TestQueuedHandshakePastDeadlineRefused: the only slot held, a full
// handshake through one edge waits; the core's clock moves past
// handshake_queue_timeout; one through the other edge queues after that.
// When the slot is free, the first is closed and counted queue_timeout —
// its turn came, its deadline had passed — and the second is served.
func TestQueuedHandshakePastDeadlineRefused(t *testing.T) {
	st := newTLSStack(t, func(c *core.Config) { c.HandshakeSlots = 1 })
	release := core.HoldHandshakeSlots(st.h.srv, 1)
	late, served := make(chan error, 1), make(chan error, 1)
	go func() { _, err := st.dial(floodEdge, &st.pki.agent, nil, true); late <- err }()
	st.waitQueued(t, floodEdge, 1)
	st.h.clock.Advance(5*time.Minute + time.Second)
	go func() { _, err := st.dial(agentEdge, &st.pki.agent, nil, true); served <- err }()
	st.waitQueued(t, agentEdge, 1)
	release()
	if err := <-late; err == nil {
		t.Error("the handshake queued past its deadline was served")
	}
	if err := <-served; err != nil {
		t.Errorf("the handshake queued within its deadline: %v", err)
	}
	st.waitHandshakes(t, "full", "queue_timeout", 1)
	st.waitHandshakes(t, "full", "ok", 1)
	waitWithin(t, 5*time.Minute, "the tls handshake line", func() bool { return len(st.h.logs.JSONLines("tls handshake")) > 0 })
	lines := st.h.logs.JSONLines("tls handshake")
	if len(lines) != 1 || !strings.Contains(fmt.Sprint(lines[0]["err"]), "handshake_queue_timeout") ||
		!strings.HasPrefix(fmt.Sprint(lines[0]["measured"]), floodEdge+":") {
		t.Errorf("want one tls handshake line naming the queue timeout and the measured edge: %v", lines)
	}
}

// TestRevokedAgentCannotResume: an agent's session resumes (Go crypto/tls
// and openssl s_client -sess_out/-sess_in); its pin removed (SetPins, as
// SIGHUP does), neither ticket gets a session (the server ends the resumed
// handshake with a bad_certificate alert), each counted resumed/unpinned; a
// certificate never pinned gets no session at all.
func TestRevokedAgentCannotResume(t *testing.T) {
	testbed.Need(t, "openssl")
	st := newTLSStack(t, nil)
	cache := tls.NewLRUClientSessionCache(4)
	if _, err := st.dial(agentEdge, &st.pki.agent, cache, true); err != nil {
		t.Fatal(err)
	}
	if resumed, err := st.dial(agentEdge, &st.pki.agent, cache, true); err != nil || !resumed {
		t.Fatalf("the pinned agent's ticket: resumed %v, err %v (the revoked case would prove nothing)", resumed, err)
	}
	sess := filepath.Join(t.TempDir(), "agent.sess")
	if out, err := st.sClient(t, agentEdge, "agent", "-sess_out", sess); err != nil {
		t.Fatalf("openssl s_client -sess_out: %v\n%s", err, out)
	}
	if out, err := st.sClient(t, agentEdge, "agent", "-sess_in", sess); err != nil || !strings.Contains(out, "Reused, TLSv1.3") {
		t.Fatalf("openssl -sess_in with the pin in force did not resume: %v\n%s", err, out)
	}
	otherCache := tls.NewLRUClientSessionCache(4)
	if _, err := st.dial(agentEdge, &st.pki.other, otherCache, true); err == nil {
		t.Fatal("a certificate never pinned got in")
	}
	if resumed, err := st.dial(agentEdge, &st.pki.other, otherCache, true); err == nil || resumed {
		t.Fatalf("a certificate never pinned: resumed %v, err %v", resumed, err)
	}

	if err := st.h.srv.SetPins(map[string]string{fp(st.pki.other): "other-1"}); err != nil {
		t.Fatal(err)
	}
	before := st.handshakes(t, "resumed", "unpinned")
	if resumed, err := st.dial(agentEdge, &st.pki.agent, cache, true); err == nil {
		t.Errorf("the revoked agent got in with its ticket (resumed %v)", resumed)
	}
	// In TLS 1.3 the client has its Finished before the server's check
	// ends; the server's answer is the alert, and it reads nothing after.
	// -ign_eof: s_client reads on until the server ends the connection,
	// rather than leaving (and missing the alert) when its input closes.
	if out, err := st.sClient(t, agentEdge, "agent", "-sess_in", sess, "-ign_eof"); err == nil || !strings.Contains(out, "alert bad certificate") {
		t.Errorf("openssl -sess_in with the revoked agent's session was not refused: %v\n%s", err, out)
	}
	st.waitHandshakes(t, "resumed", "unpinned", before+2) // Go's and openssl's
	waitWithin(t, 5*time.Minute, "a tls handshake line naming the revoked pin", func() bool {
		return strings.Contains(st.h.logs.String(), "client certificate is not pinned: sha256 "+fp(st.pki.agent))
	})
}

// sClient runs openssl s_client through the edge sourced from edge with
// the PKI's certificate name (testbed.SClient).
func (st *tlsStack) sClient(t *testing.T, edge, name string, extra ...string) (string, error) {
	return testbed.SClient(t, st.edges[edge], st.pki.path("ca.pem"), st.pki.path(name+".pem"), st.pki.path(name+".key"), extra...)
}

// firstTicket is a session cache that keeps the first session it is given
// and no later one, so a test can offer one ticket again and again.
type firstTicket struct {
	mu sync.Mutex
	cs *tls.ClientSessionState
}

func (c *firstTicket) Get(string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs, c.cs != nil
}

func (c *firstTicket) Put(_ string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cs == nil && cs != nil {
		c.cs = cs
	}
}

// TestTicketKeysRotate: keys rotate every hour of the core's clock and
// three are kept. A ticket issued under the first key resumes one and two
// rotations later and not three: then it is a full handshake (and counted
// as one), which still succeeds.
func TestTicketKeysRotate(t *testing.T) {
	st := newTLSStack(t, func(c *core.Config) { c.TicketRotation, c.TicketKeys = time.Hour, 3 })
	cache := &firstTicket{}
	if _, err := st.dial(agentEdge, &st.pki.agent, cache, true); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, false} {
		st.h.clock.Advance(time.Hour)
		resumed, err := st.dial(agentEdge, &st.pki.agent, cache, true)
		if err != nil || resumed != want {
			t.Errorf("%d h after the ticket: resumed %v, err %v; want resumed %v", i+1, resumed, err, want)
		}
	}
	st.waitHandshakes(t, "full", "ok", 2)
	st.waitHandshakes(t, "resumed", "ok", 2)
}

// TestTicketKeysOff: ticket_keys 0 issues no ticket: every handshake is
// full.
func TestTicketKeysOff(t *testing.T) {
	st := newTLSStack(t, func(c *core.Config) { c.TicketKeys = 0 })
	cache := tls.NewLRUClientSessionCache(4)
	for range 2 {
		if resumed, err := st.dial(agentEdge, &st.pki.agent, cache, true); err != nil || resumed {
			t.Fatalf("resumed %v, err %v; want a full handshake", resumed, err)
		}
	}
}

// TestHandshakeFailureLinesRateLimited: 30 failed handshakes (clients
// without a certificate) in one window of the core's clock write 10 `tls
// handshake` lines; the first failure of the next window writes one line
// counting the 20 suppressed. Every failure is counted.
func TestHandshakeFailureLinesRateLimited(t *testing.T) {
	st := newTLSStack(t, nil)
	for range 30 {
		st.dial(floodEdge, nil, nil, true)
	}
	waitWithin(t, time.Minute, "30 failures counted", func() bool { return st.handshakes(t, "full", "failed") == 30 })
	if n := len(st.h.logs.JSONLines("tls handshake")); n != 10 {
		t.Errorf("%d tls handshake lines for 30 failures in one window, want 10", n)
	}
	st.h.clock.Advance(10 * time.Second)
	st.dial(floodEdge, nil, nil, true)
	waitWithin(t, time.Minute, "31 failures counted", func() bool { return st.handshakes(t, "full", "failed") == 31 })
	lines := st.h.logs.JSONLines("tls handshake")
	if len(lines) != 11 || lines[10]["suppressed"] != float64(20) {
		t.Errorf("want an 11th line with suppressed 20: %v", lines[len(lines)-1])
	}
}

// closeWaits counts the TCP sockets on this host whose local port is
// port and whose peer has half-closed (CLOSE_WAIT, state 08 in
// /proc/net/tcp): what the kernel knows, not what the core has read.
func closeWaits(t *testing.T, port string) int {
	t.Helper()
	raw, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", p)) && f[3] == "08" {
			n++
		}
	}
	return n
}

// TestReplayedHelloCostsNoHandshake: the only slot held, replayed
// ClientHellos through the flooded edge queue; then each client closes
// its write side, as the hello flood of docs/benchmarks.md does (connect,
// write a captured hello, close), and the FINs reach the core behind the
// hellos. When the slot is free, none costs a server signature: every one
// is counted full/abandoned (which the signer counts in place of signing),
// none ok or failed, and an agent's handshake is served after them.
func TestReplayedHelloCostsNoHandshake(t *testing.T) {
	st := newTLSStack(t, func(c *core.Config) { c.HandshakeSlots = 1 })
	hello := core.ClientHello(t, nil, 0)
	release := core.HoldHandshakeSlots(st.h.srv, 1)
	const replays = 8
	var conns []*net.TCPConn
	for i := range replays {
		c, err := net.DialTimeout("tcp", st.edges[floodEdge], time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(hello); err != nil {
			t.Fatal(err)
		}
		st.waitQueued(t, floodEdge, i+1)
		conns = append(conns, c.(*net.TCPConn))
	}
	got := make(chan []byte, replays)
	for _, c := range conns {
		c.CloseWrite()
		go func() {
			c.SetReadDeadline(time.Now().Add(5 * time.Minute)) // a hang guard
			b, _ := io.ReadAll(c)
			got <- b
		}()
	}
	_, port, _ := net.SplitHostPort(st.h.addr)
	waitWithin(t, 5*time.Minute, fmt.Sprintf("%d half-closed connections at the core", replays), func() bool {
		return closeWaits(t, port) >= replays
	})
	release()
	for range replays {
		<-got // the ServerHello may come (the key exchange is done), the signature never
	}
	st.waitHandshakes(t, "full", "abandoned", replays)
	for _, r := range []string{"ok", "failed", "queue_timeout"} {
		if n := st.handshakes(t, "full", r); n != 0 {
			t.Errorf("full handshakes %s = %d, want 0: a replayed hello cost a handshake", r, n)
		}
	}
	if _, err := st.dial(agentEdge, &st.pki.agent, nil, true); err != nil {
		t.Fatalf("the agent after the replays: %v", err)
	}
	st.waitHandshakes(t, "full", "ok", 1)
}

// firstRecord is the first TLS record a client with cfg sends.
func firstRecord(t *testing.T, cfg *tls.Config) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer b.Close()
	go func() { tls.Client(a, cfg).Handshake(); a.Close() }()
	b.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// TestDecryptableTicketStillWaits: a ClientHello that offers a ticket the
// core's keys decrypt, but with cipher suites the ticket's session cannot
// resume with (an attacker's edit of an agent's hello, whose ticket travels
// in clear), makes crypto/tls fall back to a full handshake: it waits for
// a slot like any full handshake (TLS 1.2 and 1.3), is counted full, and
// does not sign while the only slot is held.
func TestDecryptableTicketStillWaits(t *testing.T) {
	for _, v12 := range []bool{true, false} {
		t.Run(map[bool]string{true: "TLS 1.2", false: "TLS 1.3"}[v12], func(t *testing.T) {
			st := newTLSStack(t, func(c *core.Config) { c.HandshakeSlots = 1 })
			st.tls12 = v12
			cache := tls.NewLRUClientSessionCache(4)
			if _, err := st.dial(agentEdge, &st.pki.agent, cache, true); err != nil {
				t.Fatal(err)
			}
			cfg := &tls.Config{RootCAs: st.pki.pool, ServerName: "127.0.0.1", ClientSessionCache: cache,
				Certificates: []tls.Certificate{st.pki.agent}}
			if v12 {
				cfg.MaxVersion = tls.VersionTLS12
			}
			hello := firstRecord(t, cfg)
			// The cipher suites follow the record and handshake headers,
			// the version, the random and the session id.
			at := 5 + 4 + 2 + 32
			at += 1 + int(hello[at])
			n := int(hello[at])<<8 | int(hello[at+1])
			suites := hello[at+2 : at+2+n]
			for i := 0; i+1 < len(suites); i += 2 {
				switch {
				case !v12 && suites[i] == 0x13:
					suites[i+1] = 0x02 // TLS_AES_256_GCM_SHA384: another hash than the session's
				case v12 && suites[i] == 0xc0:
					suites[i+1] = 0x2c // ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
				}
			}
			release := core.HoldHandshakeSlots(st.h.srv, 1)
			c, err := net.DialTimeout("tcp", st.edges[floodEdge], time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write(hello)
			st.waitQueued(t, floodEdge, 1) // it waits for the signature's slot
			release()
			c.Close()
			waitWithin(t, 5*time.Minute, "the edited hello's handshake counted", func() bool {
				return st.handshakes(t, "full", "failed")+st.handshakes(t, "full", "abandoned") == 1
			})
			if n := st.handshakes(t, "resumed", "failed") + st.handshakes(t, "resumed", "ok"); n != 0 {
				t.Errorf("%d handshakes counted resumed: the edited hello resumed nothing", n)
			}
		})
	}
}

// TestSilentClientHoldsNoSlot: a client that sends a ClientHello and then
// neither reads nor closes gets the only slot; once the core has signed
// its first flight the slot is free again, so an agent's full handshake
// through the other edge is served while that client still holds its
// connection (the handshake itself waits for the client up to
// handshake_timeout, without a slot).
func TestSilentClientHoldsNoSlot(t *testing.T) {
	st := newTLSStack(t, func(c *core.Config) {
		c.HandshakeSlots = 1
		c.HandshakeQueueTimeout = 10 * time.Second // the agent's wait, were the slot still held
	})
	events := core.TraceHandshakes(st.h.srv)
	c, err := net.DialTimeout("tcp", st.edges[floodEdge], time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(firstRecord(t, &tls.Config{ServerName: "127.0.0.1", InsecureSkipVerify: true}))
	waitWithin(t, 5*time.Minute, "the silent client's slot", func() bool { return slices.Contains(events(), "granted "+floodEdge) })
	if _, err := st.dial(agentEdge, &st.pki.agent, nil, true); err != nil {
		t.Fatalf("the agent while a silent client holds its handshake open: %v", err)
	}
	if n := st.handshakes(t, "full", "queue_timeout"); n != 0 {
		t.Errorf("queue_timeout = %d: the silent client held the slot", n)
	}
}
