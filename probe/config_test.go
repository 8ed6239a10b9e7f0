package probe

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.Name = "ldap.example.com"
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults with a name: %v", err)
	}
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Name = "" }, "name: required"},
		{func(c *Config) { c.Port = 0 }, "port: 0 is not a TCP port"},
		{func(c *Config) { c.Port = 65536 }, "port: 65536"},
		{func(c *Config) { c.Budget = 0 }, "budget: 0s must be positive"},
		{func(c *Config) { c.Interval = -time.Second }, "interval: -1s"},
		{func(c *Config) { c.Stale = 0 }, "stale: 0s"},
		{func(c *Config) { c.Streak = 0 }, "streak: 0 must be at least 1"},
		{func(c *Config) { c.MinGain = -time.Millisecond }, "min_gain: -1ms"},
		{func(c *Config) { c.MinGainRatio = 1 }, "min_gain_ratio: 1 is not in [0, 1)"},
		{func(c *Config) { c.MinGainRatio = math.NaN() }, "min_gain_ratio: NaN is not in [0, 1)"},
	} {
		c := good
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate: %v, want %q", err, tc.want)
		}
	}
}

// TestWorthSwitching: the seed's worked examples, both thresholds needed.
func TestWorthSwitching(t *testing.T) {
	c := DefaultConfig()
	for _, tc := range []struct {
		cur, next time.Duration
		want      bool
	}{
		{100 * time.Millisecond, 79 * time.Millisecond, false}, // 21 ms but 21 %
		{4 * time.Millisecond, 3 * time.Millisecond, false},    // 25 % but 1 ms
		{100 * time.Millisecond, 60 * time.Millisecond, true},
		{100 * time.Millisecond, 80 * time.Millisecond, false}, // 20 ms met, 20 % not
		{80 * time.Millisecond, 60 * time.Millisecond, true},   // 20 ms and 25 %, both exactly
		{time.Millisecond, 400 * time.Microsecond, false},
		{60 * time.Millisecond, 100 * time.Millisecond, false}, // slower
	} {
		if got := c.worthSwitching(tc.cur, tc.next); got != tc.want {
			t.Errorf("%v → %v: %v, want %v", tc.cur, tc.next, got, tc.want)
		}
	}
}

// TestOrder: successes by total time, failures after them as given.
func TestOrder(t *testing.T) {
	rs := []Result{
		{Addr: "f1"}, {Addr: "slow", OK: true, TLSHandshakeMS: 50}, {Addr: "f2"},
		{Addr: "fast", OK: true, TCPConnectMS: 1, TLSHandshakeMS: 2, AppRTTMS: 3},
	}
	order(rs)
	var got []string
	for _, r := range rs {
		got = append(got, r.Addr)
	}
	if strings.Join(got, ",") != "fast,slow,f1,f2" {
		t.Fatalf("order %v", got)
	}
}
