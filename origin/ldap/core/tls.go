package core

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/edgefleet/edgefleet/internal/splice"
	"github.com/edgefleet/edgefleet/ldap/wire"
)

var errNotPinned = errors.New("client certificate is not pinned")

// serverTLS adds client-certificate checking to the configured certificate.
// In mtls mode every handshake checks the client's certificate against the
// pins in force (SetPins swaps them): VerifyConnection, not
// VerifyPeerCertificate, because crypto/tls skips the latter when a client
// resumes a session from a ticket, which would let a certificate whose pin
// was removed back in with a ticket issued before.
func (s *Server) serverTLS() *tls.Config {
	c := s.cfg.TLS.Clone()
	if c.MinVersion == 0 {
		c.MinVersion = tls.VersionTLS12
	}
	// Full handshakes take their certificate from gateCert, which holds
	// them to the handshake slots (handshake.go).
	s.certs, c.Certificates = c.Certificates, nil
	c.GetCertificate = s.gateCert
	if s.cfg.TLSMode != TLSMTLS {
		return c
	}
	if c.ClientCAs != nil {
		c.ClientAuth = tls.RequireAndVerifyClientCert
	} else {
		c.ClientAuth = tls.RequireAnyClientCert
	}
	c.VerifyConnection = func(st tls.ConnectionState) error {
		pins := s.Pins()
		if len(pins) == 0 {
			return nil // client_ca alone: the chain was verified
		}
		if len(st.PeerCertificates) == 0 {
			return errNotPinned
		}
		fp := fingerprint(st.PeerCertificates[0].Raw)
		if _, ok := pins[fp]; !ok {
			return fmt.Errorf("%w: sha256 %s", errNotPinned, fp)
		}
		return nil
	}
	return c
}

// Pins is the set of pins in force (fingerprint to agent name); the
// caller must not change it.
func (s *Server) Pins() map[string]string { return *s.pins.Load() }

// SetTicketKeys puts an origin pool's session ticket keys in force (the
// first encrypts, all decrypt; SetSessionTicketKeys order): tickets
// issued from now on use them, and a ticket no key of keys decrypts gets
// a full handshake. changed is false when they are the keys in force. It
// is refused when the core was not started with shared keys (its own
// rotation would undo them) or keys is empty.
func (s *Server) SetTicketKeys(keys [][32]byte) (changed bool, err error) {
	switch {
	case s.tickets == nil || !s.tickets.shared:
		return false, errors.New("not set at start: the core rotates its own keys (restart it to share a pool's)")
	case len(keys) == 0:
		return false, errors.New("no ticket key")
	case s.tickets.keep <= 0:
		return false, nil // tickets are off (core.tls.ticket_keys 0)
	}
	return s.tickets.set(keys), nil
}

// SetPins replaces the pins the next handshakes are checked against (a
// resumed session's too); sessions already open go on. A set the
// configuration's check refuses — mtls with neither pins nor client_ca —
// is refused and the running one kept.
func (s *Server) SetPins(pins map[string]string) error {
	c := s.cfg
	c.Pins = pins
	if err := c.Validate(); err != nil {
		return err
	}
	pins = maps.Clone(pins)
	if pins == nil {
		pins = map[string]string{}
	}
	s.pins.Store(&pins)
	return nil
}

func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// agentOf names the client of a finished handshake: its pin, else the
// certificate's common name.
func (s *Server) agentOf(st tls.ConnectionState) string {
	if len(st.PeerCertificates) == 0 {
		return ""
	}
	cert := st.PeerCertificates[0]
	if name, ok := s.Pins()[fingerprint(cert.Raw)]; ok {
		return name
	}
	return cert.Subject.CommonName
}

// accept tells LDAPS from plain LDAP by the first byte (a TLS record is
// 0x16, an LDAPMessage 0x30) and completes the TLS handshake.
func (ss *session) accept() bool {
	if ss.srv.tlsCfg == nil {
		ss.rd = wire.NewReader(clientReader{ss.client, ss})
		return true
	}
	// A client that connects and sends nothing must not hold its
	// goroutine and descriptor for ever: the first byte is part of the
	// handshake's time.
	ss.client.SetReadDeadline(time.Now().Add(ss.srv.handshakeTimeout()))
	defer ss.client.SetReadDeadline(time.Time{})
	var first [1]byte
	if _, err := io.ReadFull(ss.client, first[:]); err != nil {
		return false // a connection that closes without a byte (a health check), or a silent one
	}
	if first[0] != 0x16 {
		ss.rd = wire.NewReader(clientReader{io.MultiReader(bytes.NewReader(first[:]), ss.client), ss})
		return true
	}
	raw, tickets, err := readHello(ss.client, first[0])
	if err != nil {
		return false // closed or silent in the middle of its first record
	}
	if !ss.handshake(raw, tickets) {
		return false
	}
	ss.rd = wire.NewReader(clientReader{ss.client, ss})
	return true
}

// handshake completes the server side of a TLS handshake on the client
// connection, whose first record (raw, already read) offered tickets. A
// full handshake waits its edge's turn for a slot when it comes to the
// signature (gatedSigner); one resuming a session signs nothing and never
// waits. After it ss.client is the TLS connection.
func (ss *session) handshake(raw []byte, tickets [][]byte) bool {
	srv := ss.srv
	srv.tickets.rotate()
	hc := &hsConn{Conn: &splice.Conn{Conn: ss.client, Peeked: raw}, raw: ss.client, peer: ss.peer}
	tc := tls.Server(hc, srv.tlsCfg)
	ctx, cancel := context.WithTimeout(context.Background(), srv.handshakeTimeout())
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		switch {
		case hc.refused == hsQueueTimeout:
			srv.refusal("tls handshake", ss.peer, "err", errQueueTimeout)
			srv.hsm.total.WithLabelValues("full", hsQueueTimeout).Inc()
		case hc.refused == hsAbandoned:
			srv.refusal("tls handshake", ss.peer, "err", errAbandoned)
			srv.hsm.total.WithLabelValues("full", hsAbandoned).Inc()
		default:
			srv.handshakeFailed(ss.peer, srv.failedKind(hc, tickets), err)
		}
		return false
	}
	srv.handshakeDone(tc.ConnectionState())
	ss.client, ss.isTLS = tc, true
	ss.agent = srv.agentOf(tc.ConnectionState())
	return true
}

// failedKind is the kind a failed handshake is counted as: full once it
// came to its signature; before that, resumed when its hello offered a
// ticket the core's keys decrypt (a resumption the pins refused, say).
func (s *Server) failedKind(hc *hsConn, tickets [][]byte) string {
	if !hc.full {
		for _, t := range tickets {
			if s.tickets.decrypts(t) {
				return "resumed"
			}
		}
	}
	return "full"
}

func (ss *session) startTLS(o *op) {
	refuse := func(code int, diag string) {
		ss.reply(o, code, diag)
		ss.wake(nil)
	}
	switch {
	case ss.srv.tlsCfg == nil || !ss.srv.cfg.StartTLS:
		refuse(wire.ResultProtocolError, "StartTLS is not offered")
		return
	case ss.isTLS:
		refuse(wire.ResultOperationsError, "TLS is already established")
		return
	case len(ss.pending) > 0 || ss.rd.Buffered() > 0:
		refuse(wire.ResultOperationsError, "StartTLS with operations outstanding")
		return
	}
	ss.out.Write(wire.ExtendedResult(o.m.ID, wire.ResultSuccess, "", wire.OIDStartTLS))
	if err := ss.out.sync(); err != nil {
		ss.ended = true
		return
	}
	if !ss.startTLSHandshake() {
		ss.ended = true
		return
	}
	ss.out.reset(&clientWriter{c: ss.client, d: orDefault(ss.srv.cfg.WriteTimeout)})
	ss.log(o, "", wire.ResultName(wire.ResultSuccess))
	ss.wake(ss.client)
}

func (s *Server) handshakeTimeout() time.Duration { return orDefault(s.cfg.HandshakeTimeout) }

// orDefault is d, or 30 s when d is 0.
func orDefault(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return 30 * time.Second
}
