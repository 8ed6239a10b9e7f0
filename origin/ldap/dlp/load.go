package dlp

import (
	"math"
	"sync"
	"time"
)

// Load is every server's operations in flight and its saturation: in
// flight ÷ capacity × 100, smoothed over the monitoring interval
// (docs/balancers.md). The core calls Begin when it sends an operation to a
// server and End when the operation is over, however it ends.
//
// The smoothing is an exponential moving average in continuous time with
// the monitoring interval as its time constant, brought up to date at
// every Begin, End and read: exact for a count that changes in steps, and
// driven by the injected clock alone, so a test moves it by hand.
type Load struct {
	mu  sync.Mutex
	now func() time.Time
	tau float64 // seconds
	cap func(server string) int
	s   map[string]*serverLoad
}

type serverLoad struct {
	capacity int
	inFlight int
	avg      float64   // smoothed in-flight count at `at`
	at       time.Time // last update
}

// NewLoad returns a Load for f's servers (capacities from their routes,
// smoothing over f's MonitorInterval); now is the clock (nil: time.Now).
func NewLoad(f *File, now func() time.Time) *Load {
	if now == nil {
		now = time.Now
	}
	return &Load{now: now, tau: f.Defaults.MonitorInterval.Seconds(), cap: f.Capacity, s: map[string]*serverLoad{}}
}

// get returns server's state brought up to date (mu held).
func (l *Load) get(server string) *serverLoad {
	now := l.now()
	s := l.s[server]
	if s == nil {
		s = &serverLoad{capacity: l.cap(server), at: now}
		l.s[server] = s
		return s
	}
	if dt := now.Sub(s.at).Seconds(); dt > 0 {
		n := float64(s.inFlight)
		s.avg = n + (s.avg-n)*math.Exp(-dt/l.tau)
		s.at = now
	}
	return s
}

// Begin counts an operation sent to server.
func (l *Load) Begin(server string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.get(server).inFlight++
}

// End counts an operation of server as over.
func (l *Load) End(server string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.get(server); s.inFlight > 0 {
		s.inFlight--
	}
}

// InFlight is server's operations in flight now.
func (l *Load) InFlight(server string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.get(server).inFlight
}

// Saturation is server's smoothed saturation in percent, 0..100 (a server
// with more than its capacity in flight is 100 % saturated).
func (l *Load) Saturation(server string) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.get(server)
	return min(100, 100*s.avg/float64(s.capacity))
}

// Capacity is server's capacity.
func (l *Load) Capacity(server string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.get(server).capacity
}
