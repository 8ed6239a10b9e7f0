package stack

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/miekg/dns"
)

// Kind is what stands at one address of a Fleet's A set.
type Kind string

// The kinds of address a Fleet can publish.
const (
	KindEdge    Kind = "edge"    // our edge in front of the origin
	KindSlow    Kind = "slow"    // our edge behind a relay adding SlowRTT to each round trip
	KindRefused Kind = "refused" // nothing listens
	KindHole    Kind = "hole"    // SYNs go unanswered (testbed.BlackHoleAt)
	KindOrphan  Kind = "orphan"  // our edge whose origin is gone
)

// SlowRTT is what a KindSlow address adds to each round trip.
const SlowRTT = 40 * time.Millisecond

// Zone is the zone a Fleet's named serves; Name (testbed.ServerName) is in it.
const Zone = "edgefleet.test"

// Fleet is a name served by a real BIND 9 whose A set is our edges (and
// the failures asked for) on 127.0.0.2, .3, … sharing one port, in front
// of a real Origin.
//
//	f := stack.NewFleet(t, stack.KindEdge, stack.KindSlow, stack.KindHole)
//	f.Named.Addr             // the DNS server (probe --dns)
//	f.Port, f.Addrs          // the edges' port and ip:port in the order asked
type Fleet struct {
	Origin *Origin
	Named  *testbed.Named
	Port   int
	Addrs  []string         // ip:port, in the order asked
	Edges  map[string]*Edge // by ip:port, for the kinds edge and orphan
}

// NewFleet starts the origin, one address per kind, and named publishing
// testbed.ServerName with one A record per address.
func NewFleet(t testing.TB, kinds ...Kind) *Fleet {
	t.Helper()
	f := &Fleet{Origin: Start(t), Edges: map[string]*Edge{}}
	var gone *Origin
	var ips []string
	for i := range kinds {
		ips = append(ips, fmt.Sprintf("127.0.0.%d", i+2))
	}
	port, err := SharedPort(ips)
	if err != nil {
		t.Fatal(err)
	}
	f.Port = port
	host := testbed.ServerName[:len(testbed.ServerName)-len(Zone)-1]
	var records []string
	for i, kind := range kinds {
		ip := ips[i]
		addr := net.JoinHostPort(ip, strconv.Itoa(port))
		records = append(records, host+" 60 IN A "+ip)
		f.Addrs = append(f.Addrs, addr)
		switch kind {
		case KindEdge:
			f.Edges[addr] = f.Origin.EdgeAt(t, "edge-"+ip, addr)
		case KindSlow:
			testbed.DelayAt(t, addr, f.Origin.Edge(t, "edge-far-"+ip).Addr, SlowRTT)
		case KindRefused:
		case KindHole:
			testbed.BlackHoleAt(t, addr)
		case KindOrphan:
			if gone == nil {
				gone = Start(t)
				gone.StopFront()
			}
			f.Edges[addr] = gone.EdgeAt(t, "edge-orphan-"+ip, addr)
		default:
			t.Fatalf("unknown kind %q", kind)
		}
	}
	f.Named = testbed.StartNamed(t, testbed.NamedConfig{Zone: Zone, Records: records})
	return f
}

// RestartEdge brings a stopped edge back on its address.
func (f *Fleet) RestartEdge(t testing.TB, addr string) {
	t.Helper()
	old := f.Edges[addr]
	f.Edges[addr] = f.Origin.EdgeAt(t, old.Name, addr)
}

// Unpublish removes addr's A record from the name with an RFC 2136 update
// signed with named's TSIG key, as `fleet rotate` does: the edge keeps
// running, it is only no longer in the set.
func (f *Fleet) Unpublish(t testing.TB, addr string) {
	t.Helper()
	ip, _, _ := net.SplitHostPort(addr)
	rr, err := dns.NewRR(dns.Fqdn(testbed.ServerName) + " 60 IN A " + ip)
	if err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	m.SetUpdate(f.Named.Zone)
	m.Remove([]dns.RR{rr})
	m.SetTsig(f.Named.KeyName, f.Named.KeyAlgorithm, 300, time.Now().Unix())
	c := &dns.Client{Timeout: 5 * time.Second, TsigSecret: map[string]string{f.Named.KeyName: f.Named.KeySecret}}
	r, _, err := c.Exchange(m, f.Named.Addr)
	if err != nil || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("remove %s from %s: %v %v", ip, testbed.ServerName, r, err)
	}
}

// SharedPort finds a port free on every one of ips right now, below the
// ephemeral range: an A set whose addresses all serve one port.
func SharedPort(ips []string) (int, error) {
	for range 50 {
		port, err := testbed.LowPort(ips[0])
		if err != nil {
			return 0, err
		}
		free := true
		for _, ip := range ips {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				free = false
				break
			}
			ln.Close()
		}
		if free {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no port free on all of %s … %s", ips[0], ips[len(ips)-1])
}
