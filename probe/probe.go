package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"time"

	"github.com/edgefleet/edgefleet/internal/safefile"
	"github.com/edgefleet/edgefleet/ldap/wire"
)

// DefaultBudget bounds one probe of one address, connect, handshake and
// LDAP round trip together. It stands beside the agent's connect timeout
// rather than leaning on it: an edge that accepts and then stays silent
// would otherwise hold a handshake open past any connect timeout.
const DefaultBudget = 2 * time.Second

// whoAmIID is the message id of the probe's one request.
const whoAmIID = 1

// ClientTLS builds the agent's TLS config: roots from caFile (system roots
// when ""), client certificate from certFile/keyFile (none when ""),
// ServerName = serverName. The probe dials an IP and verifies the
// certificate against this name, as the agent's real connection does.
func ClientTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	conf := &tls.Config{ServerName: serverName}
	if caFile != "" {
		pem, err := safefile.Read(caFile, safefile.MaxConfig, nil)
		if err != nil {
			return nil, fmt.Errorf("read ca %s: %w", caFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca %s: no PEM certificate in it", caFile)
		}
		conf.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("client certificate: give both cert and key, or neither")
	}
	if certFile != "" {
		cert, err := safefile.X509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s: %w", certFile, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// Result is one probe of one address: one entry of a ranking. The three
// times come from the same socket; a stage that did not complete leaves
// its time 0. OK means the whole probe succeeded.
type Result struct {
	Addr           string  `json:"addr"`
	OK             bool    `json:"ok"`
	TCPConnectMS   float64 `json:"tcp_connect_ms"`
	TLSHandshakeMS float64 `json:"tls_handshake_ms"`
	AppRTTMS       float64 `json:"app_rtt_ms"`
	Error          string  `json:"error"` // "" on success: every entry has the six keys of docs/probe.md
}

// Total is the time a successful probe took, the figure a ranking sorts
// on: what the agent's own connection setup would cost through this edge.
func (r Result) Total() time.Duration {
	return time.Duration((r.TCPConnectMS + r.TLSHandshakeMS + r.AppRTTMS) * float64(time.Millisecond))
}

// Probe runs one full probe of addr ("ip:port"): TCP connect, full TLS
// handshake verified against conf.ServerName (the IP is dialed), one LDAP
// round trip (WhoAmI) proving the origin accepted the client; bounded by
// budget (DefaultBudget when <= 0).
//
// The round trip is what makes it a probe of the origin and not of the
// edge: an edge accepts TCP even when its origin is gone, and with TLS 1.3
// the client's handshake completes before the server has checked the
// client certificate, so only an answer proves the path works. Any LDAP
// response to the request counts; a notice of disconnection does not.
func Probe(ctx context.Context, addr string, conf *tls.Config, budget time.Duration) Result {
	return probe(ctx, nil, addr, conf, budget, true)
}

// probe is Probe dialing with nd (nil: the kernel picks the source), with
// the LDAP round trip only when app is set (the monitor's health is the
// handshake alone).
func probe(ctx context.Context, nd *net.Dialer, addr string, conf *tls.Config, budget time.Duration, app bool) Result {
	if budget <= 0 {
		budget = DefaultBudget
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	r := Result{Addr: addr}
	fail := func(stage string, err error) Result {
		if ctx.Err() == context.DeadlineExceeded || errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("no answer within the %v budget", budget)
		} else if ctx.Err() != nil {
			err = ctx.Err()
		} else if oe := (*net.OpError)(nil); errors.As(err, &oe) {
			err = oe.Err // the address is already in the message
		}
		r.Error = fmt.Sprintf("%s %s: %v", stage, addr, err)
		return r
	}

	start := time.Now()
	if nd == nil {
		nd = &net.Dialer{}
	}
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fail("tcp connect", err)
	}
	defer c.Close()
	r.TCPConnectMS = ms(time.Since(start))
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	// Closing the socket when ctx ends also unblocks the LDAP read.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	if conf == nil {
		conf = &tls.Config{}
	}
	tc := tls.Client(c, conf.Clone())
	start = time.Now()
	if err := tc.HandshakeContext(ctx); err != nil {
		return fail("tls handshake", err)
	}
	r.TLSHandshakeMS = ms(time.Since(start))
	if !app {
		r.OK = true
		return r
	}

	start = time.Now()
	if err := whoAmI(tc); err != nil {
		return fail("ldap whoami", err)
	}
	r.AppRTTMS = ms(time.Since(start))
	r.OK = true
	tc.Write(wire.UnbindRequest(whoAmIID + 1)) // a clean end for the origin's log
	return r
}

// whoAmI sends one WhoAmI request and reads its answer.
func whoAmI(c net.Conn) error {
	if _, err := c.Write(wire.WhoAmIRequest(whoAmIID)); err != nil {
		return err
	}
	raw, err := wire.NewReader(c).Next()
	if err != nil {
		return err
	}
	m, err := wire.Parse(raw)
	if err != nil {
		return err
	}
	switch {
	case m.ID == 0 && m.Op == wire.TagExtendedResponse:
		return fmt.Errorf("origin disconnected: %s: %s", wire.ResultName(m.ResultCode), m.Diagnostic)
	case m.ID != whoAmIID || m.Op != wire.TagExtendedResponse:
		return fmt.Errorf("unexpected answer: message id %d, op 0x%02x", m.ID, m.Op)
	}
	return nil
}

// ms is d in milliseconds, rounded to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}
