package firewall

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

func mustRun(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestRealDocker runs the origin stand-in in a real container (a FROM
// scratch image of a static Go echo server) published on an address of a
// veth the test adds to this machine; edge and stranger namespaces sit
// behind that veth. The rules go into the real DOCKER-USER, pinned to the
// veth, so nothing else on the machine is affected.
func TestRealDocker(t *testing.T) {
	t.Parallel()
	testbed.NeedDocker(t)
	testbed.Need(t, "ip", "iptables", "ip6tables")
	docker, _ := testbed.Path("docker")
	ip, _ := testbed.Path("ip")
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	hostHooksUnchanged(t)

	// The image: a static binary, no base image to pull.
	dir := t.TempDir()
	mustRun(t, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", filepath.Join(dir, "tcpecho"), "./testdata/tcpecho")
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\nCOPY tcpecho /tcpecho\nENTRYPOINT [\"/tcpecho\"]\n"), 0o644)
	image := "edgefleet-fwtest:" + id
	// Cleanups are registered before what they undo is made, so a build
	// or a run that fails halfway leaves nothing either.
	t.Cleanup(func() { exec.Command(docker, "rmi", "-f", image).Run() })
	mustRun(t, []string{"DOCKER_BUILDKIT=0"}, docker, "build", "-q", "--force-rm", "-t", image, dir)

	// The outside: host veth ↔ lan bridge ↔ edge, stranger.
	var sub int
	for try := 0; ; try++ {
		sub = int(b[0]) + try
		if out, _ := exec.Command(ip, "route", "show", fmt.Sprintf("10.211.%d.0/24", sub%256)).Output(); len(out) == 0 {
			sub %= 256
			break
		}
	}
	hostIf := "ef" + id + "h"
	v4 := func(host int) string { return fmt.Sprintf("10.211.%d.%d", sub, host) }
	v6 := func(host int) string { return fmt.Sprintf("fd00:ef:%x::%x", sub, host) }
	lan, edge, stranger := testbed.NewNetns(t, "lan"), testbed.NewNetns(t, "edge"), testbed.NewNetns(t, "stranger")
	testbed.Veth(t, lan, "up0", nil, hostIf)
	mustRun(t, nil, ip, "addr", "add", v4(1)+"/24", "dev", hostIf)
	mustRun(t, nil, ip, "addr", "add", v6(1)+"/64", "dev", hostIf, "nodad")
	mustRun(t, nil, ip, "link", "set", hostIf, "up")
	lan.Run("ip", "link", "add", "br0", "type", "bridge")
	lan.Run("ip", "link", "set", "br0", "up")
	lan.Run("ip", "link", "set", "up0", "master", "br0", "up")
	for _, p := range []struct {
		ns   *testbed.Netns
		peer string
		host int
	}{{edge, "ve", 0x10}, {stranger, "vs", 0x66}} {
		testbed.Veth(t, p.ns, "eth0", lan, p.peer)
		lan.Run("ip", "link", "set", p.peer, "master", "br0", "up")
		p.ns.Run("ip", "addr", "add", v4(p.host)+"/24", "dev", "eth0")
		p.ns.Run("ip", "addr", "add", v6(p.host)+"/64", "dev", "eth0", "nodad")
		p.ns.Run("ip", "link", "set", "eth0", "up")
	}

	// The origin: published on the veth's addresses only.
	_, portStr, _ := net.SplitHostPort(testbed.FreeAddr(t, "0.0.0.0"))
	hp, _ := strconv.Atoi(portStr)
	name := "edgefleet-fwtest-" + id
	t.Cleanup(func() { exec.Command(docker, "rm", "-f", name).Run() })
	mustRun(t, nil, docker, "run", "-d", "--name", name,
		"-p", v4(1)+":"+portStr+":8636", "-p", "["+v6(1)+"]:"+portStr+":8636", image, "serve", "8636")
	testbed.Serve(edge.Listen(":" + portStr)) // the container's outbound target
	pub4, pub6 := net.JoinHostPort(v4(1), portStr), net.JoinHostPort(v6(1), portStr)
	reach := func(ns *testbed.Netns, src, dst string, timeout time.Duration) error {
		return ns.Echo(src, dst, timeout)
	}
	deadline := time.Now().Add(15 * time.Second)
	for reach(edge, v4(0x10), pub4, time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the container never answered on %s", pub4)
		}
		time.Sleep(100 * time.Millisecond)
	}
	containerDial := func() error {
		out, err := exec.Command(docker, "exec", name, "/tcpecho", "dial", net.JoinHostPort(v4(0x10), portStr)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}

	for _, dst := range []struct{ src, dst string }{{v4(0x66), pub4}, {v6(0x66), pub6}} {
		if err := reach(stranger, dst.src, dst.dst, allowed); err != nil {
			t.Fatalf("before apply the stranger should reach %s (Docker's bypass): %v", dst.dst, err)
		}
	}

	fw := hostTestFirewall(t, id)
	t.Logf("backend %s, chains %s…", fw.Backend(), fw.prefix)
	c := DefaultConfig()
	c.Ports = []int{hp}
	c.Interface = hostIf
	c.Address = v4(1)
	c.Edges = []Edge{{Name: "edge-1", IPv4: v4(0x10), IPv6: v6(0x10)}}
	applyHere := func(c Config) {
		t.Helper()
		p, err := fw.Plan(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range p.Warnings {
			t.Logf("plan: %s", w)
		}
		if err := fw.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	applyHere(c)

	assert := func() {
		t.Helper()
		for _, f := range []struct{ name, edge, stranger, dst string }{
			{"IPv4", v4(0x10), v4(0x66), pub4}, {"IPv6", v6(0x10), v6(0x66), pub6},
		} {
			if err := reach(edge, f.edge, f.dst, allowed); err != nil {
				t.Errorf("%s: edge → %s: %v", f.name, f.dst, err)
			}
			if err := reach(stranger, f.stranger, f.dst, dropped); !isTimeout(err) {
				t.Errorf("%s: stranger → %s: err = %v, want dropped", f.name, f.dst, err)
			}
		}
		if err := containerDial(); err != nil {
			t.Errorf("container → edge on port %d (the seed's bug): %v", hp, err)
		}
	}
	assert()
	rep, err := fw.Check(c)
	if err != nil || !rep.InSync() {
		t.Errorf("check after apply: %v\n%s", err, strings.Join(rep.Diff, "\n"))
	}

	// The weaker rule set, with no pin, breaks the container's outbound
	// connection on the real engine too.
	weak := c
	weak.Interface, weak.Address, weak.Force = "", "", true
	applyHere(weak)
	if err := containerDial(); err == nil {
		t.Error("without the pin the container's outbound connection to the edge should be dropped")
	}
	applyHere(c)
	assert()

	if err := fw.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := reach(stranger, v4(0x66), pub4, allowed); err != nil {
		t.Errorf("after remove the stranger reaches the port again: %v", err)
	}
}

// hostTestFirewall is the Firewall the real-Docker test uses on the
// machine's own tables: its generation chains are EFT<id>-<n>, not
// EDGEFLEET-<n>, so it neither sees nor deletes a real deployment's chains
// (Remove and Apply's cleanup delete every chain of their prefix), and a
// second run of the test at the same time is not disturbed either. Its
// rules are removed when the test ends, however it ends.
func hostTestFirewall(t *testing.T, id string) *Firewall {
	t.Helper()
	fw, err := Open("auto", DockerUser)
	if err != nil {
		t.Fatal(err)
	}
	fw.prefix = "EFT" + id + "-"
	t.Cleanup(func() {
		if err := fw.Remove(); err != nil {
			t.Errorf("remove: %v", err)
		}
	})
	return fw
}

// hostHooksUnchanged checks, when the test ends, that the machine's own
// DOCKER-USER and INPUT chains (both families) hold exactly what they held
// before it: the test's jumps are gone and nothing else was touched.
// Lines of other runs of the test (chains EFT…) are left out.
func hostHooksUnchanged(t *testing.T) {
	t.Helper()
	snapshot := func() string {
		var b strings.Builder
		for _, cmd := range []string{"iptables", "ip6tables"} {
			path, err := testbed.Path(cmd)
			if err != nil {
				continue
			}
			for _, chain := range []string{DockerUser, Input} {
				out, _ := exec.Command(path, "-w", "-S", chain).CombinedOutput()
				for _, line := range strings.Split(string(out), "\n") {
					if !strings.Contains(line, "-j EFT") && !strings.HasPrefix(line, "# Warning") {
						fmt.Fprintf(&b, "%s %s\n", cmd, line)
					}
				}
			}
		}
		return b.String()
	}
	before := snapshot()
	t.Cleanup(func() { // registered first: runs after every other cleanup
		if after := snapshot(); after != before {
			t.Errorf("the machine's DOCKER-USER/INPUT chains changed:\n%s", strings.Join(diff(strings.Split(before, "\n"), strings.Split(after, "\n")), "\n"))
		}
	})
}
