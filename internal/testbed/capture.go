package testbed

import (
	"bufio"
	"bytes"
	"encoding/json"
	"sync"
	"time"
)

// Buffer is a bytes.Buffer safe for concurrent writes and reads: a
// process's output, or a logger's destination read back by the test.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// JSONLines returns the JSON log lines written so far whose "msg" is msg
// (all lines for msg ""); lines that are not JSON objects are skipped.
func (s *Buffer) JSONLines(msg string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && (msg == "" || m["msg"] == msg) {
			out = append(out, m)
		}
	}
	return out
}

// Clock is a clock a test moves by hand, for code that takes a
// func() time.Time (OFFLINE expiry, retry timers, token buckets): made by
// NewClock it reads its start until advanced; by RealClock, the real time
// until Freeze stops it there; after Tick, it moves on at every reading.
type Clock struct {
	mu   sync.Mutex
	now  time.Time
	real bool
	step time.Duration
}

// NewClock returns a Clock that reads start until it is advanced.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// RealClock returns a Clock that reads the real time until Freeze.
func RealClock() *Clock { return &Clock{real: true} }

// Tick makes every reading of a stopped clock step after the one before
// (any two readings are step apart at least, whatever the machine's
// speed) and returns c.
func (c *Clock) Tick(step time.Duration) *Clock {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = step
	return c
}

// Now is the clock's time; pass c.Now where a func() time.Time is wanted.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real {
		return time.Now()
	}
	c.now = c.now.Add(c.step)
	return c.now
}

// Freeze stops a RealClock at the real time: it reads that until
// advanced.
func (c *Clock) Freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real {
		c.now, c.real = time.Now(), false
	}
}

// Advance moves a stopped clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
