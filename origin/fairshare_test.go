package origin

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/relay"
)

// mtlsInner is a real mTLS server behind the front (the core's part: mTLS
// with the test CA): on accept it looks its client up in the peer table,
// and after the handshake writes the Peer as one JSON line and echoes.
// It counts the connections the front forwarded to it by the edge the
// front measured.
type mtlsInner struct {
	addr string
	mu   sync.Mutex
	by   map[string]int // connections accepted, by the measured host
}

func startMTLSInner(t *testing.T, table *PeerTable, pki *testbed.PKI) *mtlsInner {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in := &mtlsInner{addr: ln.Addr().String(), by: map[string]int{}}
	cfg := &tls.Config{Certificates: []tls.Certificate{pki.Server}, ClientCAs: pki.Pool, ClientAuth: tls.RequireAndVerifyClientCert}
	testbed.ServeHeld(t, ln, func(c net.Conn) {
		p, _ := table.LookupAddr(c.RemoteAddr().(*net.TCPAddr).AddrPort())
		in.mu.Lock()
		if h, _, err := net.SplitHostPort(p.Measured); err == nil {
			in.by[h]++
		}
		in.mu.Unlock()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Server(c, cfg)
		if tc.Handshake() != nil {
			return
		}
		b, _ := json.Marshal(p)
		tc.Write(append(b, '\n'))
		io.Copy(tc, tc)
	})
	return in
}

func (in *mtlsInner) served(host string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.by[host]
}

// TestPerEdgeFairShare: two real edges (relay.Edge, PROXY v2, dialling
// the front from 127.0.0.2 and 127.0.0.3, both trusted) in front of one
// front, a real mTLS server behind it. Edge A is flooded by TLS clients
// from eight addresses (bounded in count and time) far past a small
// per_edge; meanwhile an agent (client certificate, verified server)
// connects through edge B again and again. Every one of the agent's
// connections gets through, measured as edge B and claimed as itself;
// the flood's refusals are counted under edge A's address, none under
// B's; edge A is held to its burst plus its rate over the flood's time.
func TestPerEdgeFairShare(t *testing.T) {
	const (
		burst, perSec = 25, 10
		agentConns    = 20 // within one burst: the agent is never over its own share
		floodWorkers  = 8
		floodMax      = 3000
		floodTime     = 15 * time.Second
	)
	pki := testbed.NewPKI(t)
	var inner *mtlsInner
	h := newHarnessWith(t, "127.0.0.1", func(table *PeerTable) string {
		inner = startMTLSInner(t, table, pki)
		return inner.addr
	}, func(c *Config) {
		c.TrustedEdges = []string{"127.0.0.2", "127.0.0.3"}
		c.RequireHeader = true
		c.PerEdge = PerEdge{Conns: 4, Rate: strconv.Itoa(perSec) + "/s", Burst: burst}
	})
	edgeA := startOurEdge(t, func(c *relay.Config) {
		c.Name, c.Source, c.Origins, c.ProxyProtocol = "edge-a", "127.0.0.2", relay.OriginList(h.addr), relay.ProxyV2
	})
	edgeB := startOurEdge(t, func(c *relay.Config) {
		c.Name, c.Source, c.Origins, c.ProxyProtocol = "edge-b", "127.0.0.3", relay.OriginList(h.addr), relay.ProxyV2
	})
	refusedA := func() float64 {
		return refusedOf(t, h.reg, "127.0.0.2", RefusedRate) + refusedOf(t, h.reg, "127.0.0.2", RefusedConns)
	}

	stop := make(chan struct{})
	var attempts atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range floodWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			flood(edgeA.addr, "127.0.1."+strconv.Itoa(i+1), pki, stop, &attempts, floodMax, start.Add(floodTime))
		}()
	}
	stopFlood := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopFlood)
	eventually(t, "the flood refused at the front", func() bool { return refusedA() > 0 })

	for i := range agentConns {
		p := agentThrough(t, edgeB.addr, pki)
		if hostOf(t, p.Measured) != "127.0.0.3" || p.Edge != "edge-b" || hostOf(t, p.Claimed) != clientIP {
			t.Fatalf("agent connection %d: the inner saw %+v; want measured edge B (127.0.0.3), edge-b, claimed %s", i, p, clientIP)
		}
	}
	stillFlooding := attempts.Load() < floodMax && time.Now().Before(start.Add(floodTime))
	stopFlood()
	elapsed := time.Since(start)

	if n := refusedOf(t, h.reg, "127.0.0.3", RefusedRate) + refusedOf(t, h.reg, "127.0.0.3", RefusedConns); n != 0 {
		t.Errorf("edge B: %v refusals, want none", n)
	}
	if n := refusedOf(t, h.reg, UntrustedShare, RefusedRate) + refusedOf(t, h.reg, UntrustedShare, RefusedConns); n != 0 {
		t.Errorf("%v refusals counted as untrusted: the edges are trusted", n)
	}
	if got := inner.served("127.0.0.3"); got != agentConns {
		t.Errorf("inner accepted %d connections through edge B, want the agent's %d", got, agentConns)
	}
	admittedA := inner.served("127.0.0.2")
	if max := burst + int(elapsed.Seconds()*perSec) + 1; admittedA > max {
		t.Errorf("edge A got %d connections through in %v, more than its burst %d and %d/s allow (%d)", admittedA, elapsed, burst, perSec, max)
	}
	var lineA, lineB int
	for _, l := range h.logs.JSONLines("edge over its share refused") {
		switch l["share"] {
		case "127.0.0.2":
			lineA++
		case "127.0.0.3":
			lineB++
		}
	}
	if lineA == 0 || lineB != 0 {
		t.Errorf("refusal lines: %d for edge A (want some), %d for edge B (want none)", lineA, lineB)
	}
	t.Logf("flood: %d connections to edge A in %v, %d forwarded, %v refused (rate %v, conns %v); still flooding when the agent was done: %v",
		attempts.Load(), elapsed.Round(time.Millisecond), admittedA, refusedA(),
		refusedOf(t, h.reg, "127.0.0.2", RefusedRate), refusedOf(t, h.reg, "127.0.0.2", RefusedConns), stillFlooding)
	if !stillFlooding {
		t.Error("the flood ended before the agent was done: raise floodMax or floodTime")
	}
}

// flood connects to addr from src, one TLS client after another (no
// client certificate: the server works, the client sends nothing it
// could not replay), until stop, max connections over all workers, or
// the deadline.
func flood(addr, src string, pki *testbed.PKI, stop <-chan struct{}, n *atomic.Int64, max int64, deadline time.Time) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	cfg := &tls.Config{RootCAs: pki.Pool, ServerName: testbed.ServerName}
	for {
		select {
		case <-stop:
			return
		default:
		}
		if n.Add(1) > max || time.Now().After(deadline) {
			return
		}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			continue
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		tls.Client(c, cfg).Handshake()
		c.Close()
	}
}

// agentThrough is one agent connection through the edge at addr: an mTLS
// handshake with the test CA's agent certificate, the inner's Peer line,
// an echo; it fails the test when any of it fails.
func agentThrough(t *testing.T, addr string, pki *testbed.PKI) Peer {
	t.Helper()
	c := dialFrom(t, clientIP, addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, &tls.Config{RootCAs: pki.Pool, ServerName: testbed.ServerName, Certificates: []tls.Certificate{pki.Agent}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("agent handshake through edge B: %v", err)
	}
	r := bufio.NewReader(tc)
	p := readPeer(t, r)
	if _, err := tc.Write(payload); err != nil {
		t.Fatalf("agent write: %v", err)
	}
	echo := make([]byte, len(payload))
	if _, err := io.ReadFull(r, echo); err != nil {
		t.Fatalf("agent echo: %v", err)
	}
	return p
}
