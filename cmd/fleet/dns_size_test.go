package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/deploy/monitoring"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// dig runs dig against server with args and returns its whole output.
func dig(t *testing.T, server string, args ...string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(server)
	out, err := exec.Command("dig", append([]string{"@" + host, "-p", port, "+time=2", "+tries=2"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var (
	digFlags = regexp.MustCompile(`(?m)^;; flags: ([a-z ]*);`)
	digSize  = regexp.MustCompile(`(?m)^;; MSG SIZE\s+rcvd: (\d+)`)
)

// digHeader is the flags and the size of the answer dig printed.
func digHeader(t *testing.T, out string) (flags []string, size int) {
	t.Helper()
	f, n := digFlags.FindStringSubmatch(out), digSize.FindStringSubmatch(out)
	if f == nil || n == nil {
		t.Fatalf("no flags or size in dig's output:\n%s", out)
	}
	size, _ = strconv.Atoi(n[1])
	return strings.Fields(f[1]), size
}

// TestDNSManyEdges: 60 IPv4 edges (an answer of ~1 KB, past the 512
// bytes of plain DNS over UDP) are published by fleet dns apply and read
// back by fleet dns list; dig with EDNS gets them in one UDP answer with
// an OPT record, dig without EDNS gets a truncated (TC) answer of at most
// 512 bytes and then all of them over TCP — against BIND 9 and the
// embedded server. An ANY query to the embedded server gets one HINFO
// (RFC 8482), not every record of the name.
func TestDNSManyEdges(t *testing.T) {
	testbed.Need(t, "dig")
	for _, peer := range dnsPeers() {
		t.Run(peer.name, func(t *testing.T) {
			addr, key := peer.start(t, t.TempDir(), []string{`ldap 300 IN TXT "not ours"`})
			var edges, want []string
			for i := 1; i <= 60; i++ {
				a := fmt.Sprintf("198.51.100.%d", i)
				edges = append(edges, fmt.Sprintf("e%d=%s", i, a))
				want = append(want, a)
			}
			cfg := inventory(t, t.TempDir(), addr, key, "ldap.example.test", edges...)
			if r := fleetRun(t, nil, "--config", cfg, "dns", "apply"); r.code != 0 {
				t.Fatalf("apply 60 edges: exit %d\n%s", r.code, r.stderr)
			}
			r := fleetRun(t, nil, "--config", cfg, "dns", "list", "--format", "json")
			var list rrsetJSON
			if err := json.Unmarshal([]byte(r.stdout), &list); r.code != 0 || err != nil || len(list.A) != 60 {
				t.Fatalf("list: exit %d, %d addresses (%v)\n%s%s", r.code, len(list.A), err, r.stdout, r.stderr)
			}
			if r := fleetRun(t, nil, "--config", cfg, "dns", "apply"); r.code != 0 || !strings.Contains(r.stdout, "in sync") {
				t.Fatalf("second apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}

			out := dig(t, addr, "+noall", "+answer", "+comments", "+stats", "+ignore", "ldap.example.test", "A")
			flags, size := digHeader(t, out)
			if slices.Contains(flags, "tc") || !strings.Contains(out, "; EDNS: version: 0") || strings.Count(out, "\tIN\tA\t") != 60 {
				t.Fatalf("dig with EDNS: flags %v, %d bytes, want 60 records in one answer with an OPT record:\n%s", flags, size, out)
			}
			t.Logf("dig with EDNS: %d bytes, flags %v", size, flags)

			out = dig(t, addr, "+noedns", "+ignore", "+comments", "+stats", "ldap.example.test", "A")
			flags, size = digHeader(t, out)
			if !slices.Contains(flags, "tc") || size > 512 || strings.Contains(out, "EDNS:") {
				t.Fatalf("dig without EDNS over UDP: flags %v, %d bytes; want TC, at most 512 bytes, no OPT:\n%s", flags, size, out)
			}
			t.Logf("dig without EDNS over UDP: %d bytes, flags %v", size, flags)
			host, port, _ := net.SplitHostPort(addr)
			tcp, err := exec.Command("dig", "@"+host, "-p", port, "+time=2", "+tries=2", "+noedns", "+short", "ldap.example.test", "A").CombinedOutput()
			if err != nil {
				t.Fatalf("dig +noedns (retrying over TCP): %v\n%s", err, tcp)
			}
			got := strings.Fields(string(tcp))
			slices.Sort(got)
			wantSet(t, "dig without EDNS, then TCP", got, want...)

			if peer.name != "embedded" {
				return // BIND answers ANY as configured (minimal-any)
			}
			out = dig(t, addr, "+noedns", "+ignore", "+noall", "+answer", "+comments", "+stats", "ldap.example.test", "ANY")
			_, size = digHeader(t, out)
			if strings.Count(out, "\tIN\t") != 1 || !strings.Contains(out, "\tHINFO\t\"RFC8482\"") || size > 200 {
				t.Fatalf("ANY over UDP: %d bytes, want one HINFO (RFC 8482):\n%s", size, out)
			}
			t.Logf("ANY over UDP: %d bytes", size)
		})
	}
}

// nsupdate runs nsupdate (args: its key option) with script against
// server and returns what it printed and whether it succeeded.
func nsupdate(t *testing.T, server, script string, args ...string) (string, bool) {
	t.Helper()
	host, port, _ := net.SplitHostPort(server)
	cmd := exec.Command("nsupdate", args...)
	cmd.Stdin = strings.NewReader("server " + host + " " + port + "\nzone example.test\n" + script + "\nsend\n")
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestDNSServeMetrics: fleet dns serve --metrics counts UPDATEs by result
// (nsupdate unsigned, with a wrong secret, a CNAME at name; fleet dns
// apply); nsupdate's wrong secret gets BADSIG without "clocks are
// unsynchronized" (the answer carries the server's time).
func TestDNSServeMetrics(t *testing.T) {
	testbed.Need(t, "nsupdate")
	dir := t.TempDir()
	addr := lowAddr(t)
	key := testbed.WriteFile(t, dir, "fleet.key", testbed.WrongKeySecret+"\n")
	cfg := inventory(t, dir, addr, key, "ldap.example.test", "e1=192.0.2.1")
	metrics := testbed.FreeAddr(t, "127.0.0.1")
	testbed.Start(t, fleetBin(t), "--config", cfg, "dns", "serve", "--metrics", metrics)
	waitDNS(t, addr)

	if out, ok := nsupdate(t, addr, "update add ldap.example.test 60 A 192.0.2.5"); ok || !strings.Contains(out, "REFUSED") {
		t.Fatalf("unsigned nsupdate: %v\n%s", ok, out)
	}
	out, ok := nsupdate(t, addr, "update add ldap.example.test 60 A 192.0.2.5", "-y", "hmac-sha256:fleet-key:c29tZXRoaW5nIGVsc2UgZW50aXJlbHkgZGlmZmVyZW50")
	if ok || !strings.Contains(out, "NOTAUTH(BADSIG)") || strings.Contains(out, "clocks are unsynchronized") {
		t.Fatalf("nsupdate with a wrong secret: %v\n%s", ok, out)
	}
	if out, ok := nsupdate(t, addr, "update add ldap.example.test 60 CNAME elsewhere.example.net.", "-y", "hmac-sha256:fleet-key:"+testbed.WrongKeySecret); ok || !strings.Contains(out, "REFUSED") {
		t.Fatalf("nsupdate of a CNAME at name: %v\n%s", ok, out)
	}
	if r := fleetRun(t, nil, "--config", cfg, "dns", "apply"); r.code != 0 {
		t.Fatalf("apply: exit %d\n%s", r.code, r.stderr)
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	// docs/dns-deploy.md shows this very session's counts.
	doc := regexp.MustCompile(`(?m)^edgefleet_fleet_dns_updates_total\{.*$`).FindAllString(readFile(t, filepath.Join("..", "..", "docs", "dns-deploy.md")), -1)
	if len(doc) != 7 {
		t.Fatalf("docs/dns-deploy.md shows %d edgefleet_fleet_dns_updates_total lines, want one per result", len(doc))
	}
	for name, typ := range monitoring.Exported["fleet"] {
		if !strings.Contains(string(body), "# TYPE "+name+" "+typ+"\n") {
			t.Errorf("/metrics lacks the %s %s:\n%s", typ, name, body)
		}
	}
	for _, want := range append(doc,
		`edgefleet_fleet_dns_updates_total{result="unsigned"} 1`,
		`edgefleet_fleet_dns_updates_total{result="badsig"} 1`,
		`edgefleet_fleet_dns_updates_total{result="refused"} 1`,
		`edgefleet_fleet_dns_updates_total{result="success"} 1`, // the add
	) {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}
