package probe

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// Config is the agent's selection configuration. Every default has its
// reason in docs/probe.md.
type Config struct {
	// Name is the hostname agents dial: its A/AAAA set is the list of edges.
	Name string `mapstructure:"name"`
	// Port is the edges' port (the agent's LDAPS port).
	Port int `mapstructure:"port"`
	// State is the state file: the last ranking, the set it was measured
	// on and the chosen edge. Empty keeps nothing: every start measures.
	State string `mapstructure:"state"`
	// Budget bounds one probe of one address, and the agent's dial of one
	// edge. Probes run in parallel, at most MaxParallel at a time, so a
	// ranking of up to MaxParallel addresses costs one budget however
	// many are black holes (n addresses: at most ⌈n/MaxParallel⌉ budgets).
	Budget time.Duration `mapstructure:"budget"`
	// ConnectTimeout bounds the dial of the name itself, the path
	// without a choice (TCP connect and TLS handshake together, over
	// every address of the name's walk): a silent first address must
	// not hang the agent.
	ConnectTimeout time.Duration `mapstructure:"connect_timeout"`
	// Interval is the upper bound of the watcher's period: each round
	// waits a uniformly random time in [0, Interval] (full jitter).
	Interval time.Duration `mapstructure:"interval"`
	// Stale is the age after which the watcher measures the whole set again.
	Stale time.Duration `mapstructure:"stale"`
	// Streak is how many consecutive successful probes an address ranked
	// above the current one needs before the agent switches back to it.
	Streak int `mapstructure:"streak"`
	// MinGain and MinGainRatio: a switch needs a gain of at least MinGain
	// and at least MinGainRatio of the current edge's time, both.
	MinGain      time.Duration `mapstructure:"min_gain"`
	MinGainRatio float64       `mapstructure:"min_gain_ratio"`
	// Source is the local IP the probes and the agent's connections leave
	// from (a multi-homed agent; the loopback demo); "": the kernel picks.
	Source string `mapstructure:"source"`
}

// DefaultConnectTimeout is ConnectTimeout's default: several budgets, so
// that the walk of the name's addresses (as Go's dialer, it gives each
// the time left divided by the addresses left, but at least 2 s) still
// reaches a working address behind one or two black holes.
const DefaultConnectTimeout = 10 * time.Second

// DefaultConfig holds the numbers docs/probe.md gives a reason for (port
// 636, LDAPS).
func DefaultConfig() Config {
	return Config{
		Port:           636,
		Budget:         DefaultBudget,
		ConnectTimeout: DefaultConnectTimeout,
		Interval:       5 * time.Minute,
		Stale:          time.Hour,
		Streak:         2,
		MinGain:        20 * time.Millisecond,
		MinGainRatio:   0.25,
	}
}

// withDefaults is c with every zero field that has no meaning as zero
// (port, budget, connect_timeout, interval, stale, streak) set to its
// default: what the constructors check. A zero min_gain or
// min_gain_ratio is kept, it means no such threshold.
func (c Config) withDefaults() Config {
	def := DefaultConfig()
	orDefault(&c.Port, def.Port)
	orDefault(&c.Budget, def.Budget)
	orDefault(&c.ConnectTimeout, def.ConnectTimeout)
	orDefault(&c.Interval, def.Interval)
	orDefault(&c.Stale, def.Stale)
	orDefault(&c.Streak, def.Streak)
	return c
}

// orDefault sets *v to def when it is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate names the first bad value by its key. It takes c as given:
// a zero budget, interval… written in a file is an error here, while the
// constructors (NewDialer, NewWatcher, NewMonitor) give a zero field its
// default first.
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("name: required (the hostname whose addresses are the edges)")
	case c.Port < 1 || c.Port > 65535:
		return fmt.Errorf("port: %d is not a TCP port", c.Port)
	case c.Budget <= 0:
		return fmt.Errorf("budget: %v must be positive", c.Budget)
	case c.ConnectTimeout <= 0:
		return fmt.Errorf("connect_timeout: %v must be positive", c.ConnectTimeout)
	case c.Interval <= 0:
		return fmt.Errorf("interval: %v must be positive", c.Interval)
	case c.Stale <= 0:
		return fmt.Errorf("stale: %v must be positive", c.Stale)
	case c.Streak < 1:
		return fmt.Errorf("streak: %d must be at least 1", c.Streak)
	case c.MinGain < 0:
		return fmt.Errorf("min_gain: %v must not be negative", c.MinGain)
	case !(c.MinGainRatio >= 0 && c.MinGainRatio < 1): // NaN fails both

		return fmt.Errorf("min_gain_ratio: %v is not in [0, 1)", c.MinGainRatio)
	case c.Source != "" && net.ParseIP(c.Source) == nil:
		return fmt.Errorf("source: %q is not an IP address", c.Source)
	}
	return nil
}

// dialer is the net.Dialer of every probe and connection: from Source.
func (c Config) dialer() *net.Dialer {
	d := &net.Dialer{}
	if ip := net.ParseIP(c.Source); ip != nil {
		d.LocalAddr = &net.TCPAddr{IP: ip}
	}
	return d
}

// worthSwitching reports whether moving from a current edge taking cur to
// one taking next gains enough: at least MinGain and at least
// MinGainRatio of cur, both. The absolute floor alone would approve
// 100 → 79 ms; the ratio alone 4 → 3 ms; two edges in one data centre
// differ by less than a millisecond and would trade places every other day.
func (c Config) worthSwitching(cur, next time.Duration) bool {
	gain := cur - next
	return gain >= c.MinGain && float64(gain) >= c.MinGainRatio*float64(cur)
}
