package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/edgefleet/edgefleet/internal/errclass"
	"github.com/edgefleet/edgefleet/ldap/wire"
)

// The backend monitor (docs/balancers.md): every MonitorInterval each
// LdapServer gets a real operation, a root DSE base search on a
// connection of its own, bounded by ConnectTimeout (or the interval,
// when shorter, so that checks never pile up). A server that does not
// answer in time, refuses, or answers busy or unavailable is down:
// OFFLINE for every new selection, and 100 % saturated, until a check
// passes; a passing check also ends an OFFLINE period a session's failure
// started. A server frozen right after a check is thus down within two
// intervals. The first round runs one interval after start.
//
// The monitor is one of the three things that mark a server OFFLINE,
// with a failed connect and an I/O failure the client could not have
// caused.
type monitor struct {
	s        *Server
	interval time.Duration
	timeout  time.Duration
	// check is the real check (checkServer); tests of the schedule put
	// their own.
	check func(ctx context.Context, server string) error

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	last map[string]checkResult
}

// checkResult is a server's last check, for GET /backends.
type checkResult struct {
	at       time.Time
	err      error
	duration time.Duration
}

func newMonitor(s *Server) *monitor {
	d := s.file.Defaults
	m := &monitor{s: s, interval: d.MonitorInterval, timeout: min(d.ConnectTimeout, d.MonitorInterval), last: map[string]checkResult{}}
	m.check = s.checkServer
	return m
}

// start runs one watcher per server until stop.
func (m *monitor) start() {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	for _, name := range m.s.file.ServerOrder {
		m.wg.Add(1)
		go m.watch(ctx, name)
	}
}

func (m *monitor) stop() {
	if m.cancel != nil {
		m.cancel()
	}
	m.wg.Wait()
}

func (m *monitor) watch(ctx context.Context, name string) {
	defer m.wg.Done()
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, m.timeout)
		start := time.Now()
		err := m.check(cctx, name)
		cancel()
		if ctx.Err() != nil {
			return // stopping: not the server's failure
		}
		m.record(name, err, time.Since(start))
	}
}

// record applies a check's outcome to the shared health.
func (m *monitor) record(name string, err error, took time.Duration) {
	s := m.s
	h := s.health
	wasDown, wasOffline := h.Down(name), h.Offline(name)
	if errclass.LocalResources(err) { // the check never left this host: not the server's failure
		s.starving(name, err)
		return
	}
	if errors.Is(err, errServerBusy) { // inconclusive: the server is alive, its state stays
		s.log.Debug("server slow to answer the check", "target", name, "duration", took, "err", err)
		m.mu.Lock()
		m.last[name] = checkResult{at: s.now(), err: err, duration: took}
		m.mu.Unlock()
		s.balancers.Observe()
		return
	}
	if err != nil {
		h.CheckFailed(name)
		s.balancers.Failed(name)
		if !wasDown {
			s.log.Warn("server down", "target", name, "duration", took, "err", err)
		}
	} else {
		h.CheckPassed(name)
		if wasOffline {
			s.log.Info("server up", "target", name, "duration", took)
		}
	}
	m.mu.Lock()
	m.last[name] = checkResult{at: s.now(), err: err, duration: took}
	m.mu.Unlock()
	s.balancers.Observe()
}

func (m *monitor) lastCheck(name string) (checkResult, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.last[name]
	return r, ok
}

// monitorID is the message id of the monitor's search.
const monitorID = 1

// checkServer connects to name (with TLS for ssl:1 servers), reads the
// root DSE and unbinds, all within ctx: the monitor's check, and the one
// that tells a server that ended a connection on purpose from one that
// failed (answers).
func (s *Server) checkServer(ctx context.Context, name string) error {
	dl, bounded := ctx.Deadline()
	limit := time.Until(dl).Round(10 * time.Millisecond)
	heard := s.heard.of(name)
	mark := heard.count()
	conn, err := s.connect(ctx, name)
	if err != nil {
		if timedOut(err) && heard.busy(mark) { // accept queue or handshake slow on a server that works
			return fmt.Errorf("connect within %v: %w", limit, errServerBusy)
		}
		return err
	}
	defer conn.Close()
	if bounded {
		conn.SetDeadline(dl)
	}
	if _, err := conn.Write(wire.RootDSESearch(monitorID)); err != nil {
		return fmt.Errorf("root DSE search: %w", err)
	}
	rd := wire.NewReader(conn)
	rd.SetMax(MaxBackendPDU)
	for {
		raw, err := rd.Next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if heard.busy(mark) {
				return fmt.Errorf("root DSE search within %v: %w", limit, errServerBusy)
			}
			return fmt.Errorf("root DSE search: no answer within %v", limit)
		}
		if err != nil {
			return fmt.Errorf("root DSE search: %w", err)
		}
		heard.heard()
		msg, err := wire.Parse(raw)
		switch {
		case err != nil:
			return fmt.Errorf("root DSE search: %w", err)
		case msg.ID == 0:
			return errors.New("root DSE search: notice of disconnection")
		case msg.ID != monitorID:
			return fmt.Errorf("root DSE search: answer with message id %d", msg.ID)
		case msg.Op != wire.TagSearchResultDone:
			continue
		case msg.ResultCode == wire.ResultBusy || msg.ResultCode == wire.ResultUnavailable:
			return fmt.Errorf("root DSE search: %s", wire.ResultName(msg.ResultCode))
		}
		conn.Write(wire.UnbindRequest(monitorID + 1))
		return nil
	}
}

// timedOut reports whether a connect ended by its bound rather than by an
// answer (a refusal, a reset).
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}
