package core

import (
	"crypto/rand"
	"crypto/tls"
	"slices"
	"sync"
	"time"
)

// Ticket key defaults (docs/ldap-core.md): a new key every hour, the last
// 24 kept, so a session ticket resumes for 23 to 24 hours after it was
// issued and a stolen key opens at most a day of tickets.
const (
	DefaultTicketRotation = time.Hour
	DefaultTicketKeys     = 24
)

// ticketKeys holds the session ticket keys of the core's TLS config, in
// memory only (a restart makes every agent do one full handshake), and
// rotates them on the core's clock: rotate is called before every
// handshake and adds a key when the newest is rotation old, so no timer
// runs and a test's clock decides. The newest key encrypts new tickets;
// every key kept decrypts.
//
// With keys shared by an origin pool (Config.SharedTicketKeys) it holds
// those and rotates nothing: set replaces them.
type ticketKeys struct {
	cfg    *tls.Config
	every  time.Duration
	keep   int
	now    func() time.Time
	shared bool

	mu   sync.Mutex
	last time.Time // when keys[0] was made
	keys [][32]byte
}

func newTicketKeys(cfg *tls.Config, every time.Duration, keep int, shared [][32]byte, now func() time.Time) *ticketKeys {
	if every <= 0 {
		every = DefaultTicketRotation
	}
	t := &ticketKeys{cfg: cfg, every: every, keep: keep, now: now, shared: shared != nil}
	if keep <= 0 {
		cfg.SessionTicketsDisabled = true
		return t
	}
	if t.shared {
		t.set(shared)
		return t
	}
	t.rotate()
	return t
}

// set puts shared keys in force (the first encrypts): the next handshakes
// issue and resume with them. The same keys in the same order change
// nothing (changed false).
func (t *ticketKeys) set(keys [][32]byte) (changed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if slices.Equal(keys, t.keys) {
		return false
	}
	t.keys = slices.Clone(keys)
	t.cfg.SetSessionTicketKeys(t.keys)
	return true
}

// rotate adds a new key when the newest is due, dropping the oldest beyond
// keep.
func (t *ticketKeys) rotate() {
	if t.keep <= 0 || t.shared {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if len(t.keys) > 0 && now.Sub(t.last) < t.every {
		return
	}
	var k [32]byte
	rand.Read(k[:]) // never fails (crypto/rand)
	keys := append([][32]byte{k}, t.keys...)
	if len(keys) > t.keep {
		keys = keys[:t.keep]
	}
	t.keys, t.last = keys, now
	t.cfg.SetSessionTicketKeys(keys)
}

// decrypts reports whether ticket (a TLS 1.2 session ticket or a TLS 1.3
// PSK identity) is one the keys kept decrypt: a session this core issued
// and can still resume. A forged or expired one costs an AEAD open.
func (t *ticketKeys) decrypts(ticket []byte) bool {
	if t.keep <= 0 || len(ticket) == 0 {
		return false
	}
	ss, err := t.cfg.DecryptTicket(ticket, tls.ConnectionState{})
	return err == nil && ss != nil
}
