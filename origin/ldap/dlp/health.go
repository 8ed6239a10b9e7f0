package dlp

import (
	"sync"
	"time"
)

// Health is the OFFLINE state of every server, shared by all connections
// and all rules: a failure seen by one user's connection makes the server
// unselectable for every new selection (seed 000).
//
// A server is OFFLINE for OfflineRetryTimeout after its last failure.
// After that it is selectable again and stays so, however long it goes
// without being contacted, until a real attempt fails: being selectable
// is not a retry, and only a failed attempt starts a new OFFLINE period.
//
// The backend monitor (docs/balancers.md) adds a second reason: a server whose
// last check failed is down, and so OFFLINE, until a check passes,
// however long that takes; a passing check also ends an OFFLINE period
// early. A session's successful connect does not end a down state: a
// frozen server still accepts connections.
type Health struct {
	mu    sync.Mutex
	retry time.Duration
	now   func() time.Time
	fails map[string]time.Time // last failure not followed by a success
	down  map[string]bool      // the monitor's last check failed
}

// NewHealth returns a Health in which a failed server is OFFLINE for
// retry; now is the clock (time.Now outside tests).
func NewHealth(retry time.Duration, now func() time.Time) *Health {
	if now == nil {
		now = time.Now
	}
	return &Health{retry: retry, now: now, fails: map[string]time.Time{}, down: map[string]bool{}}
}

// Offline reports whether server failed less than the retry time ago, or
// is down by the monitor.
func (h *Health) Offline(server string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.fails[server]
	return h.down[server] || ok && h.now().Sub(t) < h.retry
}

// CheckFailed records a failed monitor check: server is down (and
// OFFLINE) until a check passes.
func (h *Health) CheckFailed(server string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down[server] = true
	h.fails[server] = h.now()
}

// CheckPassed records a passing monitor check: server is selectable again
// at once.
func (h *Health) CheckPassed(server string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.down, server)
	delete(h.fails, server)
}

// Down reports whether the monitor's last check of server failed.
func (h *Health) Down(server string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down[server]
}

// Fail records a connect or I/O failure: server is OFFLINE from now on, for
// everyone, for the retry time.
func (h *Health) Fail(server string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fails[server] = h.now()
}

// Succeed records a successful attempt: the failure history is cleared.
func (h *Health) Succeed(server string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.fails, server)
}

// LastFailure is the time of the last failure not followed by a success;
// zero when there is none.
func (h *Health) LastFailure(server string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fails[server]
}
