package core

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
	"github.com/prometheus/client_golang/prometheus"
)

// The monitor's schedule in fake time: with MonitorInterval 10 s and
// ConnectTimeout 3 s, a server that stops answering just after a check
// passed — the worst case — is down when the next check times out, 13 s
// later: within two intervals. It stays down (one log line) while checks
// keep failing, however long past OfflineRetryTimeout, and is up again at
// the first check that passes.
func TestMonitorSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		f, err := dlp.Parse("m.json", []byte(`[
  {"object": "Defaults", "MonitorInterval": 10, "ConnectTimeout": 3, "OfflineRetryTimeout": 5},
  {"object": "LdapServer", "name": "L1", "host": "127.0.0.1", "port": 1},
  {"object": "LdapServer", "name": "L2", "host": "127.0.0.1", "port": 2},
  {"object": "LdapProxy", "name": "ldapConfiguration", "default": ["L1", "L2"]}
]`))
		if err != nil {
			t.Fatal(err)
		}
		logs := &testbed.Buffer{}
		s, err := New(DefaultConfig(), f, nil, slog.New(slog.NewJSONHandler(logs, nil)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		s.monitor.stop() // the real check would dial; this one is told what the servers do
		var mu sync.Mutex
		hung := map[string]bool{}
		checks := map[string]int{}
		s.monitor = newMonitor(s)
		s.monitor.check = func(ctx context.Context, name string) error {
			mu.Lock()
			checks[name]++
			h := hung[name]
			mu.Unlock()
			if h {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}
		s.monitor.start()
		defer s.Shutdown(context.Background())
		at := func(d time.Duration) { // sleep until d after the start
			t.Helper()
			time.Sleep(time.Until(t0.Add(d)))
			synctest.Wait()
		}
		at(10*time.Second + time.Millisecond)
		if checks["L1"] != 1 || checks["L2"] != 1 || s.health.Offline("L1") {
			t.Fatalf("after the first round: checks %v, L1 offline %v", checks, s.health.Offline("L1"))
		}
		mu.Lock()
		hung["L1"] = true
		mu.Unlock()
		at(22*time.Second + 900*time.Millisecond)
		if s.health.Down("L1") {
			t.Fatal("L1 down before its check timed out")
		}
		at(23*time.Second + time.Millisecond)
		if !s.health.Down("L1") || !s.health.Offline("L1") || s.health.Offline("L2") {
			t.Fatalf("13 s after L1 hung: down %v offline %v, L2 offline %v", s.health.Down("L1"), s.health.Offline("L1"), s.health.Offline("L2"))
		}
		at(53*time.Second + time.Millisecond) // three more failed checks, far past OfflineRetryTimeout
		if !s.health.Offline("L1") || len(logs.JSONLines("server down")) != 1 {
			t.Fatalf("L1 offline %v, %d down lines; want OFFLINE and one line", s.health.Offline("L1"), len(logs.JSONLines("server down")))
		}
		mu.Lock()
		hung["L1"] = false
		mu.Unlock()
		at(60*time.Second + time.Millisecond)
		if s.health.Offline("L1") || len(logs.JSONLines("server up")) != 1 {
			t.Fatalf("after a passing check: L1 offline %v, %d up lines", s.health.Offline("L1"), len(logs.JSONLines("server up")))
		}
		if r, ok := s.monitor.lastCheck("L1"); !ok || r.err != nil {
			t.Errorf("last check %+v", r)
		}
	})
}
