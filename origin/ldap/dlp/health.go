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
type Health struct {
	mu    sync.Mutex
	retry time.Duration
	now   func() time.Time
	fails map[string]time.Time // last failure not followed by a success
}

// NewHealth returns a Health in which a failed server is OFFLINE for
// retry; now is the clock (time.Now outside tests).
func NewHealth(retry time.Duration, now func() time.Time) *Health {
	if now == nil {
		now = time.Now
	}
	return &Health{retry: retry, now: now, fails: map[string]time.Time{}}
}

// Offline reports whether server failed less than the retry time ago.
func (h *Health) Offline(server string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.fails[server]
	return ok && h.now().Sub(t) < h.retry
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
