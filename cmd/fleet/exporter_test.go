package main

import (
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/deploy/monitoring"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// exporterBin is a running `fleet exporter` on the inventory cfg.
type exporterBin struct {
	url  string
	proc *testbed.Proc
}

// startExporter starts it with a 200 ms cache and a 2 s timeout, or what
// flags says instead.
func startExporter(t *testing.T, cfg string, flags ...string) exporterBin {
	t.Helper()
	addr := testbed.FreeAddr(t, "127.0.0.1")
	args := append([]string{"--config", cfg, "exporter", "--listen", addr, "--cache", "200ms", "--timeout", "2s"}, flags...)
	p := testbed.Start(t, fleetBin(t), args...)
	testbed.WaitTCP(t, addr, 15*time.Second)
	return exporterBin{url: "http://" + addr + "/metrics", proc: p}
}

func (x exporterBin) scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(x.url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", x.url, resp.Status, err)
	}
	return string(b)
}

// sample is the value of one series of a text exposition ("" when absent).
func sample(body, series string) string {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// series is a fleet family's series for ldap.example.test (labels in the
// order client_golang writes them: sorted).
func series(metric, family string) string {
	if family == "" {
		return metric + `{name="ldap.example.test"}`
	}
	return metric + `{family="` + family + `",name="ldap.example.test"}`
}

// waitSamples scrapes until every series has its value ("" for absent),
// within a generous bound (the exporter caches a read for 200 ms).
func (x exporterBin) waitSamples(t *testing.T, what string, want map[string]string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		body := x.scrape(t)
		var wrong []string
		for s, v := range want {
			if got := sample(body, s); got != v {
				wrong = append(wrong, s+" = "+strconv.Quote(got)+", want "+strconv.Quote(v))
			}
		}
		if len(wrong) == 0 {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s\n/metrics:\n%s", what, strings.Join(wrong, "; "), body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// setWant is the set comparison's values: inventory addresses DNS lacks
// and DNS addresses no edge has, per family (v4, v6); "" when absent.
func setWant(miss4, miss6, unk4, unk6 string) map[string]string {
	return map[string]string{
		series("edgefleet_fleet_dns_missing_records", "ipv4"): miss4,
		series("edgefleet_fleet_dns_missing_records", "ipv6"): miss6,
		series("edgefleet_fleet_dns_unknown_records", "ipv4"): unk4,
		series("edgefleet_fleet_dns_unknown_records", "ipv6"): unk6,
	}
}

// with merges the wants.
func with(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// fleetWant is the three families' values: inventory edges and DNS
// records per family (v4, v6), dns_up; records "" when absent.
func fleetWant(inv4, inv6, rec4, rec6, up string) map[string]string {
	return map[string]string{
		series("edgefleet_fleet_inventory_edges", "ipv4"): inv4,
		series("edgefleet_fleet_inventory_edges", "ipv6"): inv6,
		series("edgefleet_fleet_dns_records", "ipv4"):     rec4,
		series("edgefleet_fleet_dns_records", "ipv6"):     rec6,
		series("edgefleet_fleet_dns_up", ""):              up,
	}
}

// TestExporter runs `fleet exporter` against the embedded server (`fleet
// dns serve`) and BIND 9, publishing with `fleet dns apply`: /metrics
// serves every family deploy/monitoring lists for the fleet, with its
// type; the DNS set and the inventory per family, before and after the
// apply and after fleet.yaml gains an edge; and, once the server is gone,
// dns_up 0 and no records series rather than an empty set.
func TestExporter(t *testing.T) {
	testbed.Need(t, "dig")
	for _, peer := range []struct {
		name  string
		start func(t *testing.T, dir string) (addr, key string, stop func())
	}{
		{"embedded", func(t *testing.T, dir string) (string, string, func()) {
			addr := lowAddr(t)
			key := testbed.WriteFile(t, dir, "server.key", testbed.WrongKeySecret+"\n")
			p := testbed.Start(t, fleetBin(t), "--config", inventory(t, dir, addr, key, "ldap.example.test"), "dns", "serve")
			waitDNS(t, addr)
			return addr, key, p.Stop
		}},
		{"bind", func(t *testing.T, dir string) (string, string, func()) {
			n := testbed.StartNamed(t, testbed.NamedConfig{Zone: "example.test", Names: []string{"ldap.example.test"}})
			return n.Addr, n.KeyFile, n.Proc.Stop
		}},
	} {
		t.Run(peer.name, func(t *testing.T) {
			addr, key, stop := peer.start(t, t.TempDir())
			dir := t.TempDir()
			edges := []string{"e1=192.0.2.1,2001:db8::1", "e2=192.0.2.2", "e3=192.0.2.3"}
			cfg := inventory(t, dir, addr, key, "ldap.example.test", edges...)
			x := startExporter(t, cfg)

			body := x.waitSamples(t, "before publishing", with(fleetWant("3", "1", "0", "0", "1"), setWant("3", "1", "0", "0")))
			if !strings.Contains(body, "\nprocess_open_fds ") {
				t.Errorf("/metrics lacks process_open_fds")
			}

			if r := fleetRun(t, nil, "--config", cfg, "dns", "apply"); r.code != 0 {
				t.Fatalf("dns apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			x.waitSamples(t, "after dns apply", with(fleetWant("3", "1", "3", "1", "1"), setWant("0", "0", "0", "0")))

			// fleet.yaml is read on every scrape: a fourth edge, not yet
			// published, is a DNS set smaller than the inventory.
			inventory(t, dir, addr, key, "ldap.example.test", append(edges, "e4=192.0.2.4,2001:db8::4")...)
			x.waitSamples(t, "after fleet.yaml gained e4", with(fleetWant("4", "2", "3", "1", "1"), setWant("1", "1", "0", "0")))

			// e3 deleted from fleet.yaml and e4 added, not applied: the
			// counts agree (3 = 3), the sets do not, and e3's address is
			// exported as unknown.
			inventory(t, dir, addr, key, "ldap.example.test", edges[0], edges[1], "e4=192.0.2.4")
			body = x.waitSamples(t, "after fleet.yaml swapped e3 for e4", with(fleetWant("3", "1", "3", "1", "1"), setWant("1", "0", "1", "0"),
				map[string]string{`edgefleet_fleet_dns_unknown_address{address="192.0.2.3",family="ipv4",name="ldap.example.test"}`: "1"}))
			for name, typ := range monitoring.Exported["fleet-exporter"] {
				if !strings.Contains(body, "\n# TYPE "+name+" "+typ+"\n"+name) {
					t.Errorf("/metrics lacks %s %s with a sample", typ, name)
				}
			}

			stop()
			x.waitSamples(t, "with the server stopped", with(fleetWant("3", "1", "", "", "0"), setWant("", "", "", ""),
				map[string]string{`edgefleet_fleet_dns_unknown_address{address="192.0.2.3",family="ipv4",name="ldap.example.test"}`: ""}))
			testbed.WaitOutput(t, x.proc, 10*time.Second, "dns read failed", addr)
		})
	}
}

// TestExporterBadInventory: an inventory the exporter cannot read from is
// one line and exit 2, before anything listens; the TSIG key is not
// needed (reads are unsigned); a fleet.yaml broken while it runs keeps the
// last inventory that loaded until it is fixed.
func TestExporterBadInventory(t *testing.T) {
	dir := t.TempDir()
	listen := testbed.FreeAddr(t, "127.0.0.1")
	noServer := testbed.WriteFile(t, dir, "fleet.yaml", "name: ldap.example.test\nzone: example.test\nedges: [{name: e1, ipv4: 192.0.2.1}]\n")
	oneLineFailure(t, "no dns.server", fleetRun(t, nil, "--config", noServer, "exporter", "--listen", listen), 2, "dns.server: required to read the edges' DNS set")
	if c, err := net.Dial("tcp", listen); err == nil {
		c.Close()
		t.Fatal("the exporter listened on a bad inventory")
	}

	unreadable := inventory(t, dir, lowAddr(t), dir+"/missing.key", "ldap.example.test", "e1=192.0.2.1")
	x := startExporter(t, unreadable)
	x.waitSamples(t, "without the key file, no server", fleetWant("1", "0", "", "", "0"))

	// fleet.yaml broken while the exporter runs (a half-saved edit): the
	// last inventory that loaded is still reported, and the error logged.
	good := readFile(t, unreadable)
	testbed.WriteFile(t, dir, "fleet.yaml", good+"  - {name: e2, ipv5: 192.0.2.2}\n")
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(x.proc.Output(), "fleet.yaml does not load"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no line about the broken fleet.yaml:\n%s", x.proc.Output())
		}
		x.waitSamples(t, "with fleet.yaml broken", fleetWant("1", "0", "", "", "0"))
	}
	if !strings.Contains(x.proc.Output(), "ipv5") {
		t.Errorf("the line about the broken fleet.yaml does not name the key:\n%s", x.proc.Output())
	}
	testbed.WriteFile(t, dir, "fleet.yaml", good+"  - {name: e2, ipv4: 192.0.2.2, ipv6: \"2001:db8::2\"}\n")
	x.waitSamples(t, "with fleet.yaml fixed", fleetWant("2", "1", "", "", "0"))
}

// TestDocExporter: the fleet exporter session of docs/dns-deploy.md, on
// the page's inventory published to the embedded server with fleet dns
// apply, serves exactly the fleet series the page shows.
func TestDocExporter(t *testing.T) {
	testbed.Need(t, "dig")
	var session string
	for _, b := range testbed.DocBlocks(t, "docs/dns-deploy.md", "") {
		if strings.HasPrefix(b, "$ fleet exporter") {
			session = b
		}
	}
	_, shown, ok := strings.Cut(session, "| grep ^edgefleet_fleet\n")
	if !ok {
		t.Fatal("docs/dns-deploy.md shows no fleet exporter session with its fleet series")
	}
	dir := t.TempDir()
	cfg := testbed.WriteFile(t, dir, "fleet.yaml", testbed.DocBlocks(t, "docs/dns-deploy.md", "yaml")[0])
	testbed.WriteFile(t, dir, "fleet.key", "key \"fleet-key\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0\";\n};\n")
	server := lowAddr(t)
	t.Setenv("EDGEFLEET_DNS_SERVER", server) // the documented port may be taken
	testbed.Start(t, fleetBin(t), "--config", cfg, "dns", "serve")
	waitDNS(t, server)
	if r := fleetRun(t, nil, "--config", cfg, "dns", "apply"); r.code != 0 {
		t.Fatalf("dns apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	x := startExporter(t, cfg)
	var got strings.Builder
	for _, l := range strings.Split(x.scrape(t), "\n") {
		if strings.HasPrefix(l, "edgefleet_fleet") {
			got.WriteString(l + "\n")
		}
	}
	if got.String() != shown {
		t.Fatalf("/metrics serves:\n%sthe page shows:\n%s", got.String(), shown)
	}
}

// TestExporterScrapeStorm: scrapes within --cache share one read of the
// server, counted by a UDP relay in front of the embedded server: 30
// concurrent scrapes after the first send it no query. Without a cache
// every scrape reads. A server that stops answering (the relay drops the
// queries) is dns_up 0 and no records series, each scrape bounded by
// --timeout.
func TestExporterScrapeStorm(t *testing.T) {
	testbed.Need(t, "dig")
	dir := t.TempDir()
	server := lowAddr(t)
	key := testbed.WriteFile(t, dir, "server.key", testbed.WrongKeySecret+"\n")
	cfg := inventory(t, dir, server, key, "ldap.example.test", "e1=192.0.2.1,2001:db8::1", "e2=192.0.2.2")
	testbed.Start(t, fleetBin(t), "--config", cfg, "dns", "serve")
	waitDNS(t, server)
	if r := fleetRun(t, nil, "--config", cfg, "dns", "apply"); r.code != 0 {
		t.Fatalf("dns apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	relay := testbed.StartUDPRelay(t, server)
	viaRelay := inventory(t, t.TempDir(), relay.Addr, key, "ldap.example.test", "e1=192.0.2.1,2001:db8::1", "e2=192.0.2.2")

	cached := startExporter(t, viaRelay, "--cache", "1h")
	cached.waitSamples(t, "first scrape", fleetWant("2", "1", "2", "1", "1"))
	perRead := relay.Queries()
	if perRead == 0 {
		t.Fatal("the relay saw no query: the exporter did not read through it")
	}
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() {
			resp, err := http.Get(cached.url)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got := sample(string(b), series("edgefleet_fleet_dns_records", "ipv4")); got != "2" {
				t.Errorf("a scrape of the storm: ipv4 records %q, want 2", got)
			}
		})
	}
	wg.Wait()
	if n := relay.Queries(); n != perRead {
		t.Fatalf("30 scrapes within --cache sent %d queries, want none after the first read's %d", n-perRead, perRead)
	}
	t.Logf("one read is %d queries; 31 scrapes within --cache: %d", perRead, relay.Queries())

	uncached := startExporter(t, viaRelay, "--cache", "0")
	before := relay.Queries()
	for range 3 {
		uncached.scrape(t)
	}
	if n := relay.Queries() - before; n != 3*perRead {
		t.Fatalf("3 scrapes without a cache sent %d queries, want %d", n, 3*perRead)
	}

	relay.Silence(true)
	uncached.waitSamples(t, "with the server silent", fleetWant("2", "1", "", "", "0"))
	testbed.WaitOutput(t, uncached.proc, 10*time.Second, "dns read failed", "no answer (timeout)")
}
