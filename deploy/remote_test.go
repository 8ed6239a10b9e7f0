package deploy

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/firewall"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"golang.org/x/crypto/ssh"
)

// logged logs each change Allow makes to an origin host's firewall.
type logged struct {
	Firewall
	w    *fakeWorld
	name string
}

func (l logged) Allow(edges []Edge) (func() error, error) {
	undo, err := l.Firewall.Allow(edges)
	if err == nil && undo != nil {
		l.w.log("firewall %s allows %s", l.name, strings.Join(names(edges), " "))
	}
	return undo, err
}

func (l logged) Report(edges []Edge) (firewall.Report, error) {
	return l.Firewall.(Reporter).Report(edges)
}

// sshHost is origin host b reached over SSH: OpenSSH in its own
// namespace, where each session runs the fleet binary built from this
// tree as `fleet firewall host` against the namespace's iptables.
func sshHost(t *testing.T, w *fakeWorld) (*RemoteFirewall, *testbed.Netns) {
	t.Helper()
	testbed.NeedRoot(t)
	testbed.Need(t, "iptables", "ip6tables")
	ns := testbed.NewNetns(t, "origb")
	sshd := testbed.StartSSHD(t, ns, "127.0.0.1:22")
	fleet := testbed.Build(t, "github.com/edgefleet/edgefleet/cmd/fleet")
	h := Origin{Name: "b", SSH: "root@" + sshd.Addr, HostKey: string(ssh.MarshalAuthorizedKey(sshd.HostKey))}
	base := firewall.Config{Chain: firewall.Input, Ports: []int{8636}, Owner: "ldap.example.net"}
	r, err := NewRemoteFirewall(h, base, shellQuote(fleet)+" firewall host --backend auto --chain INPUT",
		[]ssh.AuthMethod{ssh.PublicKeys(sshd.Client)}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) { return sshd.Dial(network, addr) }
	t.Cleanup(r.Close) // before sshd stops: its sessions end first
	return r, ns
}

// TestPoolOverSSH: a rotation over two origin hosts, a local one (a
// namespace's iptables driven here) and one reached over SSH (its
// namespace's iptables driven by `fleet firewall host` through OpenSSH):
// both let e3 in before DNS adds it and drop e1 only after DNS removed it
// and its wait; the undo of a change over SSH puts the rules back; a host
// key other than the pinned one is refused before anything changes.
func TestPoolOverSSH(t *testing.T) {
	w, conv := world(t)
	w.dns.TTLA = 1
	pool, ns := originHosts(t, w)
	remote, nsB := sshHost(t, w)
	pool[1] = HostFirewall{Name: "b", Firewall: logged{remote, w, "b"}}
	ns[1] = nsB
	run := func(edges ...Edge) {
		t.Helper()
		c := conv(edges...)
		c.Config.TTL, c.Slack, c.Every = 1, 0, 50*time.Millisecond
		c.Firewall, c.DNS = pool, dnsWatch{fakeDNS{w}, pool}
		if err := c.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	run(e1, e2)
	w.events = nil
	run(e2, e3)
	if !slices.Equal(w.events, poolRotation) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(w.events, "\n"), strings.Join(poolRotation, "\n"))
	}
	if out := nsB.Run("iptables", "-S"); !strings.Contains(out, "-s 192.0.2.3/32") || strings.Contains(out, "-s 192.0.2.1/32") {
		t.Fatalf("host b's rules after the rotation:\n%s", out)
	}
	if h := pool.Hosts([]Edge{e2, e3}); h[1].Error != "" || len(h[1].Drift) != 0 || len(h[1].Chains) != 2 {
		t.Fatalf("status of host b over SSH: %+v", h[1])
	}

	// The undo of a change runs in the same session, on the far side.
	undo, err := remote.Allow([]Edge{e2})
	if err != nil || undo == nil {
		t.Fatalf("Allow e2 over SSH: %v (undo %v)", err, undo != nil)
	}
	if out := nsB.Run("iptables", "-S"); !strings.Contains(out, "-s 192.0.2.2/32") || strings.Contains(out, "-s 192.0.2.3/32") {
		t.Fatalf("host b's rules after allowing e2 alone:\n%s", out)
	}
	if src, err := remote.Sources(); err != nil || len(src) != 1 || src[netip.MustParseAddr("192.0.2.2")] != "e2" {
		t.Fatalf("sources after allowing e2 alone: %v %v", src, err)
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if d, err := remote.Diff([]Edge{e2, e3}); err != nil || len(d) != 0 {
		t.Fatalf("after the undo: diff %q, %v; want the rules for e2 e3 back", d, err)
	}

	// A change whose undo did not come before the next change stays: the
	// next Allow ends its session.
	first, err := remote.Allow([]Edge{e3})
	if err != nil || first == nil {
		t.Fatalf("Allow e3: %v", err)
	}
	if _, err := remote.Allow([]Edge{e2, e3}); err != nil {
		t.Fatal(err)
	}
	if err := first(); err == nil {
		t.Fatal("the undo of a change followed by another ran")
	}
	if d, err := remote.Diff([]Edge{e2, e3}); err != nil || len(d) != 0 {
		t.Fatalf("after the late undo: diff %q, %v", d, err)
	}

	// Another host key: refused, nothing changed on either host.
	before := nsB.Run("iptables-save")
	wrong := &RemoteFirewall{Name: "b", Addr: remote.Addr, User: remote.User, HostKey: testbed.NewSSHKey(t), Auth: remote.Auth,
		Command: remote.Command, Base: remote.Base, Dial: remote.Dial}
	pool[1] = HostFirewall{Name: "b", Firewall: wrong}
	if _, err := pool.Allow([]Edge{e2}); err == nil || !strings.Contains(err.Error(), "origin b: ") ||
		!strings.Contains(err.Error(), "host key mismatch") || !strings.Contains(err.Error(), "no origin host changed") {
		t.Fatalf("Allow with host b presenting another key: %v", err)
	}
	if d, _ := pool[0].Diff([]Edge{e2, e3}); len(d) != 0 || stripCounters(nsB.Run("iptables-save")) != stripCounters(before) {
		t.Fatalf("a host changed though b was refused: a's diff %q", d)
	}
}
