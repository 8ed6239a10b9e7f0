// Package tokenbucket is the token bucket behind every rate limit of
// edgefleet: the edge's per-source, per-prefix and accept-rate limits and
// the front's per-edge rate. A Bucket is 16 bytes, holds no clock and no
// lock: its owner passes the time in and serialises calls, so a table of
// millions of buckets costs their bytes and nothing else.
package tokenbucket

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is a refill rate and the burst a full bucket holds. The zero Rate
// limits nothing.
type Rate struct {
	PerSec float64 // tokens added per second; 0: unlimited
	Burst  float64 // the bucket's size; below 1 it is taken as 1
}

// Unlimited reports whether r limits nothing.
func (r Rate) Unlimited() bool { return r.PerSec <= 0 }

// burst is the bucket's size: Burst, at least 1.
func (r Rate) burst() float64 {
	if r.Burst < 1 {
		return 1
	}
	return r.Burst
}

// String is the rate in the form ParseRate reads ("20/s"), or "0".
func (r Rate) String() string {
	if r.Unlimited() {
		return "0"
	}
	return strconv.FormatFloat(r.PerSec, 'f', -1, 64) + "/s"
}

// ParseRate reads a rate as written in the config files: "N/s", "N/m" or
// "N/h" (N a non-negative number), or "0" or "" for no limit.
func ParseRate(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return 0, nil
	}
	num, unit, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("rate %q: want N/s, N/m or N/h", s)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || n < 0 || n != n || n > 1e9 {
		return 0, fmt.Errorf("rate %q: %q is not a number of events between 0 and 1e9", s, num)
	}
	switch strings.TrimSpace(unit) {
	case "s":
		return n, nil
	case "m":
		return n / 60, nil
	case "h":
		return n / 3600, nil
	}
	return 0, fmt.Errorf("rate %q: unit %q is not s, m or h", s, unit)
}

// Bucket is one token bucket. Its zero value is full: the first call
// fills it to the burst.
type Bucket struct {
	tokens float64
	last   int64 // unix nanoseconds of the last refill; 0: never used
}

// Allow takes one token at now under r and reports whether there was one.
// A clock that goes back adds nothing and takes nothing away.
func (b *Bucket) Allow(now time.Time, r Rate) bool {
	if r.Unlimited() {
		return true
	}
	b.refill(now, r)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Refund gives back a token Allow took, for an event a later check
// refused (never past the burst).
func (b *Bucket) Refund(r Rate) {
	if r.Unlimited() || b.last == 0 {
		return
	}
	b.tokens = min(b.tokens+1, r.burst())
}

// Full reports whether the bucket at now under r holds its whole burst,
// so that its owner may forget it (a forgotten bucket comes back full).
func (b *Bucket) Full(now time.Time, r Rate) bool {
	if r.Unlimited() {
		return true
	}
	b.refill(now, r)
	return b.tokens >= r.burst()
}

func (b *Bucket) refill(now time.Time, r Rate) {
	t := now.UnixNano()
	if b.last == 0 {
		b.tokens, b.last = r.burst(), t
		return
	}
	if t <= b.last {
		return
	}
	b.tokens += float64(t-b.last) / 1e9 * r.PerSec
	if max := r.burst(); b.tokens > max {
		b.tokens = max
	}
	b.last = t
}
