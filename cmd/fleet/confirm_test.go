package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// onPty runs the fleet binary with args on a pseudo-terminal (script(1)),
// inside ns when it is not nil, typing answer; it returns what the
// terminal showed and the exit status.
func onPty(t *testing.T, ns *testbed.Netns, answer string, args ...string) (string, int) {
	t.Helper()
	line := fleetBin(t)
	for _, a := range args {
		line += " '" + a + "'"
	}
	cmd := exec.Command("script", "-q", "-e", "-c", line, "/dev/null")
	if ns != nil {
		cmd = ns.Command("script", "-q", "-e", "-c", line, "/dev/null")
	}
	cmd.Stdin = strings.NewReader(answer)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("script: %v\n%s", err, out.String())
	return "", 0
}

// TestConfirmOnTerminal: on a terminal, fleet apply and rotate print what
// they would do and ask; "n" changes nothing (exit 1), "y" goes on, --yes
// does not ask; without a terminal (a script) nothing is asked. Against
// our edges and the embedded DNS server, on a pseudo-terminal.
func TestConfirmOnTerminal(t *testing.T) {
	testbed.Need(t, "slapd", "dig", "script")
	o, p := oneEdge(t)
	o.EdgeAt(t, "e3", "127.0.0.4:"+p)
	dir := t.TempDir()
	server := lowAddr(t)
	testbed.WriteFile(t, dir, "fleet.key", testbed.WrongKeySecret+"\n")
	inv := testbed.WriteFile(t, dir, "fleet.yaml", fmt.Sprintf(`name: ldap.example.test
zone: example.test
ttl: 1
drain_timeout: 1s
dns: {server: "%s", tsig: {name: fleet-key, algorithm: hmac-sha256, secret_file: fleet.key}}
probe: {ca: %s, cert: %s, key: %s, server_name: %s, port: %s}
edges:
  - {name: e1, ipv4: 127.0.0.2}
`, server, o.PKI.Path("ca.pem"), o.PKI.Path("agent.pem"), o.PKI.Path("agent.key"), testbed.ServerName, p))
	testbed.Start(t, fleetBin(t), "--config", inv, "dns", "serve")
	waitDNS(t, server)

	out, code := onPty(t, nil, "n\n", "--config", inv, "apply", "--no-firewall", "--allow-loopback")
	t.Logf("apply, answered n:\n%s", out)
	if code != 1 || !strings.Contains(out, "step 3/6 dns: would add A 127.0.0.2 (e1)") ||
		!strings.Contains(out, "change DNS and the firewall of ldap.example.test as above? [y/N]") || !strings.Contains(out, "not confirmed: nothing changed") {
		t.Fatalf("apply on a terminal, answered n: exit %d\n%s", code, out)
	}
	// --no-firewall: the preview says the firewall steps are skipped, as
	// the run does, and never that it would allow anything.
	if !strings.Contains(out, "step 1/6 firewall: skipped (no firewall)") || strings.Contains(out, "would allow") {
		t.Fatalf("apply --no-firewall's preview shows a firewall change:\n%s", out)
	}
	wantSet(t, "after n", digSet(t, server, "ldap.example.test", "A"))

	out, code = onPty(t, nil, "y\n", "--config", inv, "apply", "--no-firewall", "--allow-loopback")
	if code != 0 || !strings.Contains(out, "step 3/6 dns: add A 127.0.0.2 (e1), read back") {
		t.Fatalf("apply on a terminal, answered y: exit %d\n%s", code, out)
	}
	wantSet(t, "after y", digSet(t, server, "ldap.example.test", "A"), "127.0.0.2")

	before := readFile(t, inv)
	out, code = onPty(t, nil, "\n", "--config", inv, "rotate", "--no-firewall", "--allow-loopback", "--slack", "0s", "--out", "e1", "--in", "e3=127.0.0.4")
	if code != 1 || !strings.Contains(out, "would edit "+inv+": e1 out, e3=127.0.0.4 in") || !strings.Contains(out, "not confirmed") || readFile(t, inv) != before {
		t.Fatalf("rotate on a terminal, answered nothing: exit %d\n%s", code, out)
	}
	// Answered y: the preview (fleet.yaml untouched) then the rotation,
	// which writes fleet.yaml only once e3 passed its probe.
	out, code = onPty(t, nil, "y\n", "--config", inv, "rotate", "--no-firewall", "--allow-loopback", "--slack", "0s", "--out", "e1", "--in", "e3=127.0.0.4")
	t.Logf("rotate, answered y:\n%s", out)
	preview, run, _ := strings.Cut(out, "[y/N]")
	probed, edited := strings.Index(run, "step 2/6 probe: e3 127.0.0.4:"+p+" ok"), strings.Index(run, "edited "+inv+": e1 out, e3=127.0.0.4 in")
	if code != 0 || !strings.Contains(preview, "would edit "+inv+": e1 out, e3=127.0.0.4 in (once e3 passed its probe)") || strings.Contains(preview, "edited ") ||
		probed < 0 || edited < probed {
		t.Fatalf("rotate on a terminal, answered y: exit %d\n%s", code, out)
	}
	if !strings.Contains(readFile(t, inv), "e3") {
		t.Fatalf("fleet.yaml after the rotation:\n%s", readFile(t, inv))
	}
	wantSet(t, "after the rotation", digSet(t, server, "ldap.example.test", "A"), "127.0.0.4")
	out, code = onPty(t, nil, "", "--config", inv, "rotate", "--no-firewall", "--allow-loopback", "--slack", "0s", "--out", "e3", "--in", "e1=127.0.0.2", "--yes")
	if code != 0 || strings.Contains(out, "[y/N]") || !strings.Contains(out, "edited "+inv+": e3 out, e1=127.0.0.2 in") {
		t.Fatalf("rotate --yes on a terminal: exit %d\n%s", code, out)
	}
	wantSet(t, "after the rotation back", digSet(t, server, "ldap.example.test", "A"), "127.0.0.2")

	r := fleetRun(t, nil, "--config", inv, "apply", "--no-firewall", "--allow-loopback") // stdin is not a terminal
	if r.code != 0 || strings.Contains(r.stderr, "[y/N]") {
		t.Fatalf("apply without a terminal: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// --output json on a terminal, stdout to a file (a pipe to jq): the
	// preview and the question are on the terminal, the file holds the
	// run's one object.
	jsonOut := filepath.Join(dir, "apply.json")
	cmd := exec.Command("script", "-q", "-e", "-c", fleetBin(t)+" --config '"+inv+"' apply --no-firewall --allow-loopback --output json >'"+jsonOut+"'", "/dev/null")
	cmd.Stdin = strings.NewReader("y\n")
	term, err := cmd.CombinedOutput()
	var res applyJSON
	if b, _ := os.ReadFile(jsonOut); err != nil || json.Unmarshal(b, &res) != nil || !res.Converged || res.DryRun ||
		!strings.Contains(string(term), "step 3/6 dns: ldap.example.test. in sync: 127.0.0.2") || !strings.Contains(string(term), "[y/N]") {
		t.Fatalf("apply --output json on a terminal: %v\nterminal:\n%s\nstdout:\n%s", err, term, b)
	}
}

// TestFirewallRemoveConfirm: on a terminal fleet firewall remove asks;
// "n" leaves the rules (exit 1), "y" removes them. iptables in a network
// namespace, on a pseudo-terminal.
func TestFirewallRemoveConfirm(t *testing.T) {
	testbed.Need(t, "iptables", "script")
	ns := testbed.NewNetns(t, "origin")
	inv := testbed.WriteFile(t, t.TempDir(), "fleet.yaml", "name: ldap.example.test\nzone: example.test\n"+
		"origin: {ports: [8636], interface: lo}\nedges:\n  - {name: e1, ipv4: 192.0.2.1}\n")
	if r := fleetRun(t, ns, "--config", inv, "firewall", "apply", "--chain", "INPUT"); r.code != 0 {
		t.Fatalf("firewall apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	out, code := onPty(t, ns, "n\n", "--config", inv, "firewall", "remove", "--chain", "INPUT")
	if code != 1 || !strings.Contains(out, "remove every edgefleet rule? the origin ports will be open to anyone who reaches them [y/N]") ||
		!strings.Contains(ns.Run("iptables", "-S"), "EDGEFLEET") {
		t.Fatalf("firewall remove, answered n: exit %d\n%s\n%s", code, out, ns.Run("iptables", "-S"))
	}
	if out, code = onPty(t, ns, "y\n", "--config", inv, "firewall", "remove", "--chain", "INPUT"); code != 0 || strings.Contains(ns.Run("iptables", "-S"), "EDGEFLEET") {
		t.Fatalf("firewall remove, answered y: exit %d\n%s\n%s", code, out, ns.Run("iptables", "-S"))
	}
}
