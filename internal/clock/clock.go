// Package clock is the one way a server's clock is injected. Every server
// and prober has one exported field,
//
//	// Now, if non-nil, is used instead of time.Now.
//	Now func() time.Time
//
// and reads it through clock.Now (never a copy of its own nil check) for
// the timestamps it records, the durations it logs and the windows it
// keeps (the OFFLINE retry, the log-line limits, staleness). Round trips
// timed as a measurement of real work (the probe's connect and handshake
// times, the core monitor's check time) are the runtime's clock's, and so
// are waits and timeouts (timers, sleeps, socket deadlines): a test that
// needs them to pass at once runs in a testing/synctest bubble, whose fake
// clock moves time.Now, timers and sleeps together, so a server takes no
// Sleep or timer of its own to inject.
//
// The field is set before the server starts (before Serve, or in the
// Config of a constructor that starts goroutines itself, as the LDAP
// core's New starts its monitor) and never changed after.
package clock

import "time"

// Now is f(), or time.Now() when f is nil.
func Now(f func() time.Time) time.Time {
	if f != nil {
		return f()
	}
	return time.Now()
}

// Func is f, or time.Now when f is nil: for a clock handed on to a
// helper that takes one (a health table, a log limiter).
func Func(f func() time.Time) func() time.Time {
	if f != nil {
		return f
	}
	return time.Now
}
