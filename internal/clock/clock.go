// Package clock is the one way a server's clock is injected. Every server
// and prober has one exported field,
//
//	// Now, if non-nil, is used instead of time.Now.
//	Now func() time.Time
//
// and reads it through clock.Now (never a copy of its own nil check), for
// everything it measures, logs or keeps a window of: durations, the
// OFFLINE retry, the log-line limits, staleness, timestamps. Waits and
// timeouts (timers, sleeps, socket deadlines) run on the runtime's clock:
// a test that needs them to pass at once runs in a testing/synctest
// bubble, whose fake clock moves time.Now, timers and sleeps together, so
// a server takes no Sleep or timer of its own to inject.
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
