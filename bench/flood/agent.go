package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/go-ldap/ldap/v3"
	"golang.org/x/sys/unix"
)

// agent is one agent: its own source address, the edge it goes through
// and its TLS configuration with its own session cache (a reconnecting
// agent resumes when the core issued it a ticket).
type agent struct {
	local net.IP
	edge  string // ip:port
	tls   *tls.Config
}

// newAgents makes n agents on 127.0.1.first, … through edge.
func newAgents(b *base, n, first int, edge string) []*agent {
	var as []*agent
	for i := range n {
		as = append(as, &agent{
			local: net.IPv4(127, 0, 1, byte(first+i)),
			edge:  edge,
			tls: &tls.Config{ServerName: testbed.ServerName, RootCAs: b.pki.Pool,
				Certificates: []tls.Certificate{b.pki.Agent}, ClientSessionCache: tls.NewLRUClientSessionCache(4)},
		})
	}
	return as
}

// noPort leaves the source port to connect (IP_BIND_ADDRESS_NO_PORT), so
// binding the source address does not reserve a port per connection.
func noPort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// once is one operation of the agent: a new connection, the LDAPS
// handshake, a simple bind as alice, a search for bob's cn, close.
func (a *agent) once() error {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: a.local}, Timeout: 5 * time.Second, Control: noPort}
	c, err := ldap.DialURL("ldaps://"+a.edge, ldap.DialWithDialer(d), ldap.DialWithTLSConfig(a.tls))
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetTimeout(5 * time.Second)
	if err := c.Bind(testbed.User("alice"), "alice-pw"); err != nil {
		return err
	}
	sr, err := c.Search(ldap.NewSearchRequest("ou=people,"+testbed.Suffix, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
		0, 5, false, "(uid=bob)", []string{"cn"}, nil))
	if err != nil {
		return err
	}
	if len(sr.Entries) != 1 {
		return fmt.Errorf("search: %d entries, want 1", len(sr.Entries))
	}
	return nil
}

// agentStats is what a group of agents measured.
type agentStats struct {
	OK, Failed int
	Rate       float64 // successful operations per second
	P50, P99   time.Duration
	FirstErr   string
}

// runAgents runs the agents for d, each at rate operations per second
// (a late operation delays the next, it does not bunch them up).
func runAgents(as []*agent, rate float64, d time.Duration) agentStats {
	interval := time.Duration(float64(time.Second) / rate)
	var mu sync.Mutex
	var lats []time.Duration
	var st agentStats
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for i, a := range as {
		wg.Go(func() {
			next := start.Add(interval * time.Duration(i) / time.Duration(len(as))) // spread the starts
			for {
				time.Sleep(time.Until(next))
				if time.Now().After(end) {
					return
				}
				t0 := time.Now()
				err := a.once()
				lat := time.Since(t0)
				mu.Lock()
				if err != nil {
					st.Failed++
					if st.FirstErr == "" {
						st.FirstErr = err.Error()
					}
				} else {
					lats = append(lats, lat)
				}
				mu.Unlock()
				if next = next.Add(interval); time.Since(next) > interval {
					next = time.Now()
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(lats)
	st.OK = len(lats)
	st.Rate = float64(st.OK) / d.Seconds()
	if len(lats) > 0 {
		st.P50, st.P99 = lats[len(lats)/2], lats[len(lats)*99/100]
	}
	return st
}

// warm runs one operation of each agent, so that each holds a session
// ticket when the configuration issues them; failures are ignored.
func warm(as []*agent) {
	var wg sync.WaitGroup
	for _, a := range as {
		wg.Go(func() { a.once() })
	}
	wg.Wait()
}
