// Package core is the LDAP routing core the origin fronts: it terminates
// TLS (LDAPS, StartTLS, client certificates pinned by fingerprint), learns
// each client's true peer from the front's peer table, and routes every
// client's LDAP operations to a pool of directory servers by the rules of a
// DLP file (origin/ldap/dlp), with failover, round robin and the load
// balancers of balance(LB) rules, while a monitor checks every server
// (monitor.go; GET /backends: BackendsHandler).
//
//	file, err := dlp.ParseFile("ldap_proxy.json")
//	srv, err := core.New(core.DefaultConfig(), file, lookup, log, prometheus.NewRegistry())
//	go srv.Serve(ln)            // or srv.HandleConn(c) per accepted connection
//	defer srv.Shutdown(ctx)
//
// PDUs are framed and parsed shallowly (ldap/wire) and forwarded as
// they arrived; the core only builds the PDUs it answers itself. Without a
// DLP file, with proxy mode 0 or without an LdapProxy named Config.Name,
// the core runs in plain mode: every connection is joined unchanged to
// Config.DefaultServer.
package core

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"time"
)

// PreBindMaxPDU caps a client's PDUs until it has bound successfully.
const PreBindMaxPDU = 256 << 10

// TLS modes of Config.TLSMode.
const (
	TLSOff  = "off"  // plain LDAP; StartTLS is refused
	TLSOn   = "tls"  // LDAPS, and StartTLS when Config.StartTLS
	TLSMTLS = "mtls" // as TLSOn, and a client certificate is required
)

// Config is the core's configuration (the `core:` section of the origin,
// docs/ldap-core.md) with files already read by the caller.
type Config struct {
	// Name selects the LdapProxy object of the DLP file.
	Name string
	// ProxyMode: 0 plain mode; 1 DLP routing, plain LDAP to backends
	// (ssl:1 servers refused); 2 DLP routing, LDAPS to ssl:1 servers.
	ProxyMode int
	// DefaultServer is the host:port every connection goes to in plain mode.
	DefaultServer string
	// TLSMode is off, tls or mtls. With tls or mtls, a connection starting
	// with a TLS record is LDAPS; one starting with an LDAP PDU may only
	// send StartTLS (when StartTLS is true) before anything else.
	TLSMode string
	// TLS holds the server certificate and, for mtls, ClientCAs (optional
	// when Pins is set). Required unless TLSMode is off.
	TLS      *tls.Config
	StartTLS bool
	// Pins maps the lower-case hex SHA-256 of a client certificate (DER) to
	// an agent name. When not empty, a client certificate must be pinned;
	// the name is the `agent` of every log line of that connection.
	Pins map[string]string
	// BackendTLS verifies ssl:1 servers in proxy mode 2 (RootCAs from
	// backend_ca; nil uses the system roots).
	BackendTLS *tls.Config
	// MaxPDU caps a client's PDUs after a successful bind (a server's are
	// capped at MaxBackendPDU, or MaxPDU when larger).
	MaxPDU int
	// MaxPending and MaxPendingAuth cap the operations a client may have
	// outstanding (sent to a server, not yet answered) before and after a
	// successful bind; one more is answered busy (51) by the core. They
	// match slapd's conn_max_pending and conn_max_pending_auth (100 and
	// 1000), beyond which slapd closes the connection.
	MaxPending, MaxPendingAuth int
	// PDUTimeout bounds how long a client may take to send the rest of a
	// PDU once its first byte has arrived; then it is disconnected. An
	// idle client (no PDU started) is not bounded. 0 is 30 s.
	PDUTimeout time.Duration
	// WriteTimeout bounds every write to a client (slapd's writetimeout):
	// a client that reads nothing for that long is disconnected, and its
	// backend connections closed, which abandons its operations there, so
	// that it cannot hold the servers' worker threads writing to them. 0 is
	// 30 s.
	WriteTimeout time.Duration
	// HandshakeTimeout bounds, with TLS on, the wait for a connection's
	// first byte and its TLS handshake (LDAPS or StartTLS); 0 is 30 s.
	HandshakeTimeout time.Duration
	// HandshakeSlots bounds the full TLS handshakes in flight; the others
	// wait, one queue per edge served round robin, at most
	// HandshakeQueueTimeout, then are closed. 0 is one per CPU and 5 s.
	HandshakeSlots        int
	HandshakeQueueTimeout time.Duration
	// TicketRotation is how often a new session ticket key is made;
	// TicketKeys how many are kept for decrypting (0: no session tickets,
	// every handshake full). DefaultConfig: 1 h and 24.
	TicketRotation time.Duration
	TicketKeys     int
	// SharedTicketKeys, when set, are the session ticket keys of an
	// origin pool (core.tls.ticket_key_file, read by cmd/origin with
	// internal/ticketkeys), in tls.Config.SetSessionTicketKeys order:
	// the first encrypts, all decrypt. The core then makes no keys and
	// rotates none (TicketRotation is unused); whoever writes the file
	// rotates them, and SetTicketKeys swaps them in. TicketKeys 0 still
	// turns tickets off.
	SharedTicketKeys [][32]byte
	// Now, if non-nil, is used instead of time.Now (internal/clock): the
	// clock of OFFLINE expiry, the load's smoothing, the monitor, the
	// session ticket keys' rotation, the handshake queue's deadline and the
	// durations logged. It is in the Config because New starts the
	// monitor.
	Now func() time.Time
	// DialBackend opens a TCP connection to a backend; nil is a net.Dialer
	// with TCP keepalive. Tests use it to shape socket buffers. The
	// backend monitor's checks dial through it too.
	DialBackend func(ctx context.Context, addr string) (net.Conn, error)
}

// DefaultConfig holds the defaults docs/ldap-core.md lists.
func DefaultConfig() Config {
	return Config{Name: "ldapConfiguration", ProxyMode: 1, TLSMode: TLSOff, StartTLS: true, MaxPDU: 4 << 20,
		MaxPending: 100, MaxPendingAuth: 1000, PDUTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		HandshakeSlots: DefaultHandshakeSlots(), HandshakeQueueTimeout: DefaultHandshakeQueueTimeout,
		TicketRotation: DefaultTicketRotation, TicketKeys: DefaultTicketKeys}
}

// Validate names the first bad value.
func (c Config) Validate() error {
	switch {
	case c.ProxyMode < 0 || c.ProxyMode > 2:
		return fmt.Errorf("core.proxy_mode: %d is not 0, 1 or 2", c.ProxyMode)
	case c.TLSMode != TLSOff && c.TLSMode != TLSOn && c.TLSMode != TLSMTLS:
		return fmt.Errorf("core.tls.mode: %q is not off, tls or mtls", c.TLSMode)
	case c.TLSMode != TLSOff && (c.TLS == nil || (len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil)):
		return fmt.Errorf("core.tls.mode %s needs core.tls.cert and core.tls.key", c.TLSMode)
	case c.TLSMode == TLSMTLS && len(c.Pins) == 0 && c.TLS.ClientCAs == nil:
		return fmt.Errorf("core.tls.mode mtls needs core.tls.pins or core.tls.client_ca")
	case c.MaxPDU < PreBindMaxPDU:
		return fmt.Errorf("core.max_pdu: %d is below %d", c.MaxPDU, PreBindMaxPDU)
	case c.MaxPending < 1:
		return fmt.Errorf("core.max_pending: %d is below 1", c.MaxPending)
	case c.MaxPendingAuth < 1:
		return fmt.Errorf("core.max_pending_auth: %d is below 1", c.MaxPendingAuth)
	case c.PDUTimeout < 0:
		return fmt.Errorf("core.pdu_timeout: %v is negative", c.PDUTimeout)
	case c.WriteTimeout < 0:
		return fmt.Errorf("core.write_timeout: %v is negative", c.WriteTimeout)
	case c.HandshakeSlots < 0:
		return fmt.Errorf("core.max_handshakes: %d is negative", c.HandshakeSlots)
	case c.HandshakeQueueTimeout < 0:
		return fmt.Errorf("core.handshake_queue_timeout: %v is negative", c.HandshakeQueueTimeout)
	case c.TicketRotation < 0:
		return fmt.Errorf("core.tls.ticket_rotation: %v is negative", c.TicketRotation)
	case c.TicketKeys < 0:
		return fmt.Errorf("core.tls.ticket_keys: %d is negative", c.TicketKeys)
	}
	if c.DefaultServer != "" {
		if _, _, err := net.SplitHostPort(c.DefaultServer); err != nil {
			return fmt.Errorf("core.default_server: %q is not host:port", c.DefaultServer)
		}
	}
	return nil
}

// ParsePins reads a pins file: one `<sha256-hex> <agent-name>` per line;
// blank lines and lines starting with # are ignored. Fingerprints may be
// written with colons and in any case.
func ParsePins(data []byte) (map[string]string, error) {
	pins := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want `<sha256-hex> <agent-name>`", n)
		}
		fp := strings.ToLower(strings.ReplaceAll(f[0], ":", ""))
		if b, err := hex.DecodeString(fp); err != nil || len(b) != 32 {
			return nil, fmt.Errorf("line %d: %q is not a SHA-256 fingerprint in hex", n, f[0])
		}
		if _, dup := pins[fp]; dup {
			return nil, fmt.Errorf("line %d: fingerprint %s pinned twice", n, f[0][:16])
		}
		pins[fp] = f[1]
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return pins, nil
}
