package relay

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/internal/clienthello"
	"github.com/edgefleet/edgefleet/internal/evloop"
)

// TLSGate is the tls_gate section: when it is on, the edge dials an origin
// only once the client's first bytes are a well-formed TLS ClientHello
// (internal/clienthello), for one of ServerNames when they are given, and
// closes anything else unrelayed. It reads the ClientHello only, which
// travels in clear: the edge still decrypts nothing and holds no key.
type TLSGate struct {
	// Mode is auto (on exactly when ServerNames is not empty; "" means
	// auto too), on (the ClientHello is checked, its SNI only against
	// ServerNames if any) or off (the edge relays whatever comes:
	// StartTLS, plain LDAP).
	Mode string `mapstructure:"mode"`
	// ServerNames are the DNS names the edge serves: a ClientHello whose
	// SNI is none of them (case folded), or that has none, is refused.
	ServerNames []string `mapstructure:"server_names"`
	// HelloTimeout bounds the wait for a whole ClientHello.
	HelloTimeout time.Duration `mapstructure:"hello_timeout"`
}

// Values of TLSGate.Mode.
const (
	GateAuto = "auto"
	GateOn   = "on"
	GateOff  = "off"
)

// defaultTLSGate is DefaultConfig's tls_gate: auto, no names, so off.
func defaultTLSGate() TLSGate {
	return TLSGate{Mode: GateAuto, HelloTimeout: 5 * time.Second}
}

// On reports whether the gate checks connections.
func (g TLSGate) On() bool {
	return g.Mode == GateOn || (g.Mode == GateAuto || g.Mode == "") && len(g.ServerNames) > 0
}

// validate names the first bad tls_gate value by its key.
func (g TLSGate) validate() error {
	if g.Mode != GateAuto && g.Mode != GateOn && g.Mode != GateOff && g.Mode != "" {
		return fmt.Errorf("tls_gate.mode: %q is not auto, on or off", g.Mode)
	}
	for i, n := range g.ServerNames {
		if err := checkDNSName(n); err != nil {
			return fmt.Errorf("tls_gate.server_names[%d]: %w", i, err)
		}
	}
	if g.On() && g.HelloTimeout <= 0 {
		return fmt.Errorf("tls_gate.hello_timeout: %v must be positive while the gate is on", g.HelloTimeout)
	}
	return nil
}

// checkDNSName accepts a host name as a client sends it in SNI: labels of
// letters, digits and '-' (not at either end), 1-63 bytes each, 253 in
// all, no trailing dot, not an IP address (a client sends no SNI for one).
func checkDNSName(n string) error {
	if n == "" || len(n) > 253 {
		return fmt.Errorf("%q is not a DNS name (1-253 characters)", n)
	}
	if strings.HasSuffix(n, ".") {
		return fmt.Errorf("%q: give the name without a trailing dot (SNI never has one)", n)
	}
	digits := true
	for _, l := range strings.Split(n, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("%q is not a DNS name (labels of 1-63 letters, digits or '-', not at either end)", n)
		}
		for _, r := range l {
			switch {
			case r >= '0' && r <= '9':
			case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-':
				digits = false
			default:
				return fmt.Errorf("%q is not a DNS name (%q is not a letter, digit or '-')", n, r)
			}
		}
	}
	if digits {
		return fmt.Errorf("%q is an IP address, not a DNS name (clients send no SNI for an address)", n)
	}
	return nil
}

// helloNames is the list the gate checks SNI against: nil (any name, or
// none) when the gate is on without server_names.
func helloNames(g TLSGate) []string {
	if len(g.ServerNames) == 0 {
		return nil
	}
	out := make([]string, len(g.ServerNames))
	for i, n := range g.ServerNames {
		out[i] = strings.ToLower(n)
	}
	return out
}

// awaitHello goes on with an admitted connection: with the gate on, the
// client's first bytes are read (Received decides) before any origin is
// chosen; otherwise the origins are dialled at once.
func (e *Edge) awaitHello(c *evloop.Conn, rc *conn) {
	if !e.gate {
		e.startDial(c, rc)
		return
	}
	c.ReadFirst(e.cfg.TLSGate.HelloTimeout)
}

// startDial plans the origins to try and dials the first. The plan is
// made only now, so that a client still sending its ClientHello holds no
// OFFLINE origin's retry.
func (e *Edge) startDial(c *evloop.Conn, rc *conn) {
	rc.plan, rc.claim = e.orig.plan(c.Now())
	e.dialNext(c, rc)
}

// Received is the gate's decision on the client's first bytes: dial on a
// ClientHello, wait for more on a prefix of one, refuse anything else.
// The bytes read stay in the connection: Relay sends them behind the
// PROXY header, in the same write.
func (h *handler) Received(c *evloop.Conn, b []byte, err error) {
	e := (*Edge)(h)
	rc := c.Data.(*conn)
	if rc.origin != nil {
		// Decided: an origin's name is being looked up, and what the
		// client sends meanwhile waits for the copy.
		return
	}
	verdict := clienthello.Check(b, e.names)
	switch {
	case verdict == nil:
		e.startDial(c, rc)
	case verdict == clienthello.ErrMore && err == nil:
		// a prefix of a ClientHello: wait for the rest
	case errors.Is(err, io.EOF) && len(b) == 0:
		e.m.total[ResultEmpty].Inc() // a health check: no line
		c.Close(reasonCounted, nil)
	case verdict == clienthello.ErrMore && errors.Is(err, evloop.ErrTimeout):
		e.refuseHello(c, rc, ResultHelloTimeout, fmt.Errorf("no whole ClientHello within tls_gate.hello_timeout %v (%d bytes)",
			e.cfg.TLSGate.HelloTimeout, len(b)))
	case verdict == clienthello.ErrMore && errors.Is(err, io.EOF):
		e.refuseHello(c, rc, ResultNotTLS, fmt.Errorf("%w: the client closed after %d bytes of one",
			clienthello.ErrNotTLS, len(b)))
	case verdict == clienthello.ErrMore && errors.Is(err, evloop.ErrGrowLimit):
		e.refuseHello(c, rc, ResultNotTLS, fmt.Errorf("%w: a ClientHello over %d bytes while the loop holds as many large ones as it may (%v)",
			clienthello.ErrNotTLS, len(b), err))
	case verdict == clienthello.ErrMore: // a read error: counted and logged by Closed
		c.Close(ResultClientError, fmt.Errorf("read the ClientHello: %w", err))
	case errors.Is(verdict, clienthello.ErrWrongSNI):
		e.refuseHello(c, rc, ResultWrongSNI, verdict)
	default:
		e.refuseHello(c, rc, ResultNotTLS, verdict)
	}
}

// refuseHello closes a client the gate refused, never dialled: counted by
// result and logged, rate-limited like every refusal.
func (e *Edge) refuseHello(c *evloop.Conn, rc *conn, result string, err error) {
	e.m.total[result].Inc()
	if ok, suppressed := e.shell.Refusals.Allow(); ok {
		e.log.Warn("client refused by the tls gate", "id", rc.id, "client", c.Peer().String(), "result", result,
			"err", err, "suppressed", suppressed)
	}
	c.Close(reasonCounted, nil)
}
