package dlp

import (
	"sync"
	"time"
)

// Health is the OFFLINE state of every server, shared by all connections.
type Health struct {
	mu    sync.Mutex
	retry time.Duration
	now   func() time.Time
	fails map[string]time.Time
}

// NewHealth returns a Health in which a failed server is OFFLINE for retry.
func NewHealth(retry time.Duration, now func() time.Time) *Health {
	return &Health{retry: retry, now: now, fails: map[string]time.Time{}}
}

// Offline reports whether server failed less than the retry time ago.
func (h *Health) Offline(server string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.fails[server]
	return ok && h.now().Sub(t) < h.retry
}

// Fail records a connect or I/O failure: server is OFFLINE now for everyone.
func (h *Health) Fail(server string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fails[server] = h.now()
}

// Succeed records a successful attempt.
func (h *Health) Succeed(server string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.fails, server)
}

// LastFailure is the time of the last failure not followed by a success.
func (h *Health) LastFailure(server string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fails[server]
}
