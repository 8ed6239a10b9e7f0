package main

import (
	"encoding/hex"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
)

// anonBind is an LDAP simple bind with no name and no password, id 1.
var anonBind, _ = hex.DecodeString("300c020101600702010304008000")

// TestLocalFDExhaustionMarksNoServerOffline: the core runs
// out of its own file descriptors while two healthy slapds sit behind
// it. The dials that fail with "socket: too many open files" never left
// the host, so no server goes OFFLINE (for OfflineRetryTimeout 60 s); the
// client whose dial failed is answered busy (51) saying why; the
// monitor's checks (every second here) that fail so count for nothing;
// and right after the flood a normal search is served again. The core
// used to mark L1 and L2 OFFLINE (and the monitor: down) and answer 52
// "every server of the selection failed" for a minute.
func TestLocalFDExhaustionMarksNoServerOffline(t *testing.T) {
	testbed.Need(t, "ldapsearch")
	slapds := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	bin := buildOrigin(t)
	front := testbed.FreeAddr(t, "127.0.0.1")
	core := testbed.FreeAddr(t, "127.0.0.1")
	dir := t.TempDir()
	var servers []string
	for i, s := range slapds {
		host, port, _ := net.SplitHostPort(s.Addr)
		servers = append(servers, fmt.Sprintf(`{"object": "LdapServer", "name": "L%d", "host": %q, "port": %s}`, i+1, host, port))
	}
	dlp := testbed.WriteFile(t, dir, "ldap_proxy.json", `[
  {"object": "Defaults", "OfflineRetryTimeout": 60, "MonitorInterval": 1},
  `+strings.Join(servers, ",\n  ")+`,
  {"object": "LdapProxy", "name": "ldapConfiguration", "default": ["L1", "L2"]}
]`)
	cfg := testbed.WriteFile(t, dir, "origin.yaml", fmt.Sprintf(`front:
  listen: [%q]
  inner: %q
peers_api: ""
metrics: ""
log:
  format: json
core:
  listen: %q
  config: %q
`, front, core, core, dlp))
	p := testbed.StartNofile(t, 60, bin, "--config", cfg)
	testbed.WaitTCP(t, front, 10*time.Second)
	testbed.WaitTCP(t, core, 10*time.Second)
	search(t, front, "before the flood")

	// The core is flooded directly: each connection costs it one accepted
	// and one dialled descriptor. A few rounds at most, until a dial ran
	// out of descriptors (accept may run out first in one round).
	var answers []*wire.Message
	for round := 0; round < 5 && !strings.Contains(p.Output(), "out of local resources"); round++ {
		answers = append(answers, floodBinds(t, core, 40, 2*time.Second)...)
	}
	testbed.WaitOutput(t, p, 10*time.Second, "out of local resources", "too many open files")
	if out := p.Output(); strings.Contains(out, "server offline") || strings.Contains(out, "server down") {
		t.Errorf("a server was marked OFFLINE (or down by the monitor) for a local resource error")
	}
	busy := false
	for _, m := range answers {
		if m.ResultCode == wire.ResultBusy && strings.Contains(m.Diagnostic, "too many open files") {
			busy = true
		}
		if m.ResultCode == wire.ResultUnavailable {
			t.Errorf("a flood client was answered unavailable: %s", m.Diagnostic)
		}
	}
	if !busy {
		t.Errorf("no flood client was answered busy (51) naming the local error; answers: %d", len(answers))
	}
	search(t, front, "after the flood")
	search(t, core, "after the flood, on the core")
}

// floodBinds opens n connections to addr, each sending an anonymous bind,
// holds them for hold, collects the answers that came, and closes them.
func floodBinds(t *testing.T, addr string, n int, hold time.Duration) []*wire.Message {
	t.Helper()
	var (
		mu  sync.Mutex
		out []*wire.Message
		wg  sync.WaitGroup
	)
	end := time.Now().Add(hold)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			break // the backlog is full
		}
		c.Write(anonBind)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetReadDeadline(end)
			raw, err := wire.NewReader(c).Next()
			if err != nil {
				return
			}
			if m, err := wire.Parse(raw); err == nil {
				mu.Lock()
				out = append(out, m)
				mu.Unlock()
			}
			time.Sleep(time.Until(end))
		}()
	}
	wg.Wait()
	return out
}

// search runs a root DSE ldapsearch through addr, retrying for a while
// (an accept loop that backed off takes up to a second to accept again);
// the result must come within seconds, not after OfflineRetryTimeout.
func search(t *testing.T, addr, when string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err := exec.Command("ldapsearch", "-x", "-LLL", "-o", "nettimeout=5", "-H", "ldap://"+addr,
			"-b", "", "-s", "base", "(objectClass=*)", "namingContexts").CombinedOutput()
		if err == nil && strings.Contains(string(out), "namingContexts: "+testbed.Suffix) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ldapsearch through %s %s: %v\n%s", addr, when, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
