package main

import (
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/deploy"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestDNSSignedAnswers: a TSIG-signed query gets an answer signed with
// the key, which the client verifies — dig -y for the name's set, also
// when the set is too large for one plain UDP answer (truncated, still
// signed), and nsupdate -k without a zone line, which finds the zone by a
// signed SOA query before it sends the UPDATE — from BIND 9 and the
// embedded server alike.
func TestDNSSignedAnswers(t *testing.T) {
	testbed.Need(t, "dig", "nsupdate")
	for _, peer := range dnsPeers() {
		t.Run(peer.name, func(t *testing.T) {
			addr, key := peer.start(t, t.TempDir(), nil)
			secret, err := deploy.TSIG{SecretFile: key}.LoadSecret()
			if err != nil {
				t.Fatal(err)
			}
			var edges []string
			for i := 1; i <= 60; i++ {
				edges = append(edges, fmt.Sprintf("e%d=198.51.100.%d", i, i))
			}
			cfg := inventory(t, t.TempDir(), addr, key, "ldap.example.test", edges...)
			if r := fleetRun(t, nil, "--config", cfg, "dns", "apply"); r.code != 0 {
				t.Fatalf("dns apply: exit %d\n%s", r.code, r.stderr)
			}
			y := "hmac-sha256:fleet-key:" + secret
			for _, args := range [][]string{
				{"ldap.example.test", "SOA"},
				{"+noedns", "+ignore", "ldap.example.test", "A"}, // truncated: 60 records do not fit 512 bytes
				{"nothere.example.test", "A"},                    // NXDOMAIN, signed too
			} {
				out := dig(t, addr, append([]string{"-y", y}, args...)...)
				if strings.Contains(out, "Couldn't verify") || strings.Contains(out, "could not be validated") || !strings.Contains(out, ";; TSIG PSEUDOSECTION:\nfleet-key.") {
					t.Fatalf("dig -y %s: the answer is not signed with the key:\n%s", strings.Join(args, " "), out)
				}
				if args[0] == "+noedns" {
					if flags, size := digHeader(t, out); !slices.Contains(flags, "tc") || size > 512 {
						t.Fatalf("dig -y +noedns: flags %v, %d bytes; want TC within 512 bytes", flags, size)
					}
				}
			}

			// A wrong secret: NOTAUTH and no records, from either server.
			host, port, _ := net.SplitHostPort(addr)
			wrong, _ := exec.Command("dig", "@"+host, "-p", port, "+time=2", "+tries=1", "-y", "hmac-sha256:fleet-key:c29tZXRoaW5nIGVsc2UgZW50aXJlbHkgZGlmZmVyZW50", "ldap.example.test", "A").CombinedOutput()
			if !strings.Contains(string(wrong), "status: NOTAUTH") || !strings.Contains(string(wrong), "ANSWER: 0,") {
				t.Fatalf("dig -y with a wrong secret: want NOTAUTH and no answer:\n%s", wrong)
			}

			keyFile := testbed.WriteFile(t, t.TempDir(), "nsupdate.key", "key \"fleet-key\" {\n\talgorithm hmac-sha256;\n\tsecret \""+secret+"\";\n};\n")
			cmd := exec.Command("nsupdate", "-k", keyFile)
			cmd.Stdin = strings.NewReader("server " + host + " " + port + "\nupdate add ldap.example.test 60 A 192.0.2.77\nsend\n")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("nsupdate -k without a zone line: %v\n%s", err, out)
			}
			if got := digSet(t, addr, "ldap.example.test", "A"); !slices.Contains(got, "192.0.2.77") {
				t.Fatalf("after nsupdate: %q", got)
			}
		})
	}
}
