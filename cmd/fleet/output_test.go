package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/deploy"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
)

// TestOutputJSON: dns plan and apply with --output json, against our edge
// and the embedded DNS server: the plan lists the UPDATEs by field; apply
// prints one object on stdout (converged, the edges, the set read back,
// the progress lines, which also go to stderr); a run that fails says so
// in the object and exits 1; a bad --output is exit 2.
func TestOutputJSON(t *testing.T) {
	testbed.Need(t, "slapd", "dig")
	o, p := oneEdge(t)
	dir := t.TempDir()
	server := lowAddr(t)
	testbed.WriteFile(t, dir, "fleet.key", testbed.WrongKeySecret+"\n")
	yaml := func(edges string) string {
		return testbed.WriteFile(t, dir, "fleet.yaml", fmt.Sprintf(`name: ldap.example.test
zone: example.test
ttl: 1
dns: {server: "%s", tsig: {name: fleet-key, algorithm: hmac-sha256, secret_file: fleet.key}}
probe: {ca: %s, cert: %s, key: %s, server_name: %s, port: %s}
edges:
%s`, server, o.PKI.Path("ca.pem"), o.PKI.Path("agent.pem"), o.PKI.Path("agent.key"), testbed.ServerName, p, edges))
	}
	inv := yaml("  - {name: e1, ipv4: 127.0.0.2}\n")
	testbed.Start(t, fleetBin(t), "--config", inv, "dns", "serve")
	waitDNS(t, server)

	r := fleetRun(t, nil, "--config", inv, "dns", "plan", "--output", "json")
	var plan deploy.PlanJSON
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil || r.code != 0 || plan.InSync || len(plan.Changes) != 1 ||
		!reflect.DeepEqual(plan.Changes[0], deploy.ChangeJSON{Op: "add", Type: "A", Address: "127.0.0.2", TTL: 1, Edge: "e1"}) || len(plan.Before) != 0 {
		t.Fatalf("dns plan --output json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}

	// A dry run reports its plan: the steps the run would take.
	r = fleetRun(t, nil, "--config", inv, "apply", "--no-firewall", "--allow-loopback", "--dry-run", "--output", "json")
	var dry applyJSON
	if err := json.Unmarshal([]byte(r.stdout), &dry); err != nil || r.code != 0 || dry.Converged || !dry.DryRun ||
		!slices.Equal(dry.Steps, []string{"step 1/6 firewall: skipped (no firewall)", "step 2/6 probe: would probe e1 end to end (127.0.0.2:" + p + ")", "step 3/6 dns: would add A 127.0.0.2 (e1)"}) {
		t.Fatalf("apply --dry-run --output json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}

	r = fleetRun(t, nil, "--config", inv, "apply", "--no-firewall", "--allow-loopback", "--output", "json")
	var res applyJSON
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 0 || !res.Converged || res.DryRun || res.Error != "" ||
		!slices.Equal(res.Edges, []string{"e1"}) || res.DNS == nil || !slices.Equal(res.DNS.A, []string{"127.0.0.2"}) ||
		!slices.Contains(res.Steps, "step 3/6 dns: add A 127.0.0.2 (e1), read back") {
		t.Fatalf("apply --output json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "step 3/6 dns: add A 127.0.0.2 (e1), read back\n") {
		t.Fatalf("apply --output json: the progress is not on stderr:\n%s", r.stderr)
	}

	// e4 accepts but its origin is gone: the probe fails, nothing is published.
	stack.EdgeTo(t, "e4", "127.0.0.5:"+p, testbed.FreeAddr(t, "127.0.0.1"))
	inv = yaml("  - {name: e1, ipv4: 127.0.0.2}\n  - {name: e4, ipv4: 127.0.0.5}\n")
	r = fleetRun(t, nil, "--config", inv, "apply", "--no-firewall", "--allow-loopback", "--output", "json")
	res = applyJSON{}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 1 || res.Converged || !strings.Contains(res.Error, "end-to-end probe failed: e4 not published") ||
		res.DNS == nil || !slices.Equal(res.DNS.A, []string{"127.0.0.2"}) {
		t.Fatalf("failing apply --output json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	oneLineFailure(t, "bad --output", fleetRun(t, nil, "--config", inv, "apply", "--output", "yaml"), 2, `--output "yaml": want text or json`)
}

// TestStepLinesKeepsAStepWhole: under --output json a step printed on
// several lines (a dry run's firewall step with its rule diff) is one
// entry of steps, however the writes split it; every byte is echoed.
func TestStepLinesKeepsAStepWhole(t *testing.T) {
	var echo strings.Builder
	s := &stepLines{echo: &echo}
	text := "step 1/6 firewall: would allow exactly e1 e3; the live rules would change so:\n" +
		"  --- live IPv4 (iptables)\n  +++ planned IPv4\n  + -A EDGEFLEET -s 192.0.2.3/32 -j RETURN\n" +
		"step 2/6 probe: would probe e3 end to end (192.0.2.3:636)\n"
	for _, part := range []string{text[:30], text[30:90], text[90:]} {
		s.Write([]byte(part))
	}
	want := []string{
		"step 1/6 firewall: would allow exactly e1 e3; the live rules would change so:\n  --- live IPv4 (iptables)\n  +++ planned IPv4\n  + -A EDGEFLEET -s 192.0.2.3/32 -j RETURN",
		"step 2/6 probe: would probe e3 end to end (192.0.2.3:636)",
	}
	if !slices.Equal(s.lines, want) || echo.String() != text {
		t.Fatalf("steps %q, echoed %q", s.lines, echo.String())
	}
}
