package testbed

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace created by a test (ip netns add) and
// deleted when the test ends. Its name is unique per test run, so tests
// may run in parallel and next to other people's namespaces.
type Netns struct {
	Name string
	t    testing.TB
}

// NewNetns creates an isolated namespace (only lo, up) named
// "ef<random>-<role>".
func NewNetns(t testing.TB, role string) *Netns {
	t.Helper()
	NeedRoot(t)
	Need(t, "ip")
	b := make([]byte, 3)
	rand.Read(b)
	n := &Netns{Name: "ef" + hex.EncodeToString(b) + "-" + role, t: t}
	run(t, "ip", "netns", "add", n.Name)
	t.Cleanup(func() {
		// Deleting the namespace deletes its interfaces, veth peers in
		// other namespaces included, and its iptables tables.
		exec.Command(must(Path("ip")), "netns", "del", n.Name).Run()
	})
	n.Run("ip", "link", "set", "lo", "up")
	return n
}

func must(p string, _ error) string { return p }

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(must(Path(name)), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Run runs a command inside the namespace (ip netns exec) and fails the
// test when it fails.
func (n *Netns) Run(name string, args ...string) string {
	n.t.Helper()
	return run(n.t, "ip", append([]string{"netns", "exec", n.Name, must(Path(name))}, args...)...)
}

// Try is Run that returns the error instead of failing.
func (n *Netns) Try(name string, args ...string) (string, error) {
	out, err := exec.Command(must(Path("ip")), append([]string{"netns", "exec", n.Name, must(Path(name))}, args...)...).CombinedOutput()
	return string(out), err
}

// Command prepares a command that runs inside the namespace.
func (n *Netns) Command(name string, args ...string) *exec.Cmd {
	return exec.Command(must(Path("ip")), append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Do runs fn on an OS thread that has entered the namespace: sockets fn
// creates belong to it (and keep belonging to it afterwards, from any
// goroutine), and processes fn starts inherit it. Goroutines fn starts do
// not.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open own netns: %w", err)
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open("/run/netns/"+n.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", n.Name, err)
			return
		}
		err = unix.Setns(target, unix.CLONE_NEWNET)
		unix.Close(target)
		if err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", n.Name, err)
			return
		}
		err = fn()
		// A thread that cannot go back stays locked and dies with this
		// goroutine instead of serving others from the wrong namespace.
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// Dial connects from inside the namespace, from local (may be empty) to
// addr.
func (n *Netns) Dial(local, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		d := net.Dialer{Timeout: timeout}
		if local != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
		}
		var err error
		c, err = d.Dial("tcp", addr)
		return err
	})
	return c, err
}

// Listen opens a TCP listener inside the namespace.
func (n *Netns) Listen(addr string) net.Listener {
	n.t.Helper()
	var ln net.Listener
	err := n.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		n.t.Fatalf("listen %s in %s: %v", addr, n.Name, err)
	}
	n.t.Cleanup(func() { ln.Close() })
	return ln
}

// Veth connects namespace a (interface aIf) to b (interface bIf) with a
// veth pair; b nil is the machine's own namespace, where bIf must be
// unique (the caller's job) and is deleted at cleanup.
func Veth(t testing.TB, a *Netns, aIf string, b *Netns, bIf string) {
	t.Helper()
	args := []string{"link", "add", aIf, "netns", a.Name, "type", "veth", "peer", "name", bIf}
	if b != nil {
		args = append(args, "netns", b.Name)
	} else {
		t.Cleanup(func() { exec.Command(must(Path("ip")), "link", "del", bIf).Run() })
	}
	run(t, "ip", args...)
}

// Serve accepts on ln until it is closed and echoes every connection: the
// peer tests connect to. Unlike EchoTCP it does not wait for its
// connections when the test ends (ln may live in a namespace the test
// tears down itself).
func Serve(ln net.Listener) {
	go serve(ln, echo, nil)
}

// Echo dials addr from the namespace, sends a line and reads it back: the
// proof that a connection works in both directions.
func (n *Netns) Echo(local, addr string, timeout time.Duration) error {
	c, err := n.Dial(local, addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	msg := []byte("edgefleet\n")
	if _, err := c.Write(msg); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := readFull(c, buf); err != nil {
		return fmt.Errorf("read echo: %w", err)
	}
	return nil
}

func readFull(c net.Conn, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := c.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// DockerHost is a Docker-like origin host built from namespaces, with no
// route to anywhere else:
//
//	Edge ─┐                       ┌─ Host ───────────────────────────────┐
//	      ├─ ext0 (bridge) ───────┤ DNAT Port → Container; FORWARD →     │── dock0 (bridge) ── Container
//	Stranger┘                     │ DOCKER-USER; MASQUERADE from dock0   │
//	Stranger2 ── ext1 (bridge) ───┤                                      │
//	                              └──────────────────────────────────────┘
//
// Edge holds two addresses (Edge, Edge2); the published port listens in
// Container (an echo server) and Edge listens on the same port number, the
// destination of the container's own outbound connections. The port is
// published as `docker run -p Port:Port` does, on every address of the
// host: Stranger2 sits behind a second interface of the host (ext1, a
// private network, a VPN …) and reaches the port at the host's address
// there (Host2), spoofing nothing.
type DockerHost struct {
	Host, Container, Edge, Stranger, Stranger2 *Netns
	ExtIf                                      string // the host's external interface
	Port                                       int    // published port, the same inside the container
	V4, V6                                     HostAddrs
}

// HostAddrs are one family's addresses in a DockerHost.
type HostAddrs struct {
	Host, Edge, Edge2, Stranger, Container netip.Addr
	Host2, Stranger2                       netip.Addr // on the host's second interface, ext1
}

// Published is the host's published address:port for the family.
func (a HostAddrs) Published(port int) string {
	return net.JoinHostPort(a.Host.String(), strconv.Itoa(port))
}

// NewDockerHost builds the topology, with the iptables rules dockerd
// would write for `docker run -p Port:Port` (DOCKER-USER with its RETURN,
// FORWARD policy DROP), for both IPv4 and IPv6, through the system's
// default iptables.
func NewDockerHost(t testing.TB, port int) *DockerHost {
	return NewDockerHostBackend(t, port, "")
}

// NewDockerHostBackend is NewDockerHost with dockerd's rules written by
// iptables-<backend> ("nft" or "legacy"; "" is plain iptables).
func NewDockerHostBackend(t testing.TB, port int, backend string) *DockerHost {
	t.Helper()
	suffix := ""
	if backend != "" {
		suffix = "-" + backend
	}
	Need(t, "ip", "iptables"+suffix, "ip6tables"+suffix)
	d := &DockerHost{
		Host: NewNetns(t, "host"), Container: NewNetns(t, "ctr"),
		Edge: NewNetns(t, "edge"), Stranger: NewNetns(t, "stranger"), Stranger2: NewNetns(t, "stranger2"),
		ExtIf: "ext0", Port: port,
		V4: HostAddrs{Host: netip.MustParseAddr("198.51.100.1"), Edge: netip.MustParseAddr("198.51.100.10"),
			Edge2: netip.MustParseAddr("198.51.100.11"), Stranger: netip.MustParseAddr("198.51.100.66"),
			Container: netip.MustParseAddr("172.31.0.2"),
			Host2:     netip.MustParseAddr("203.0.113.1"), Stranger2: netip.MustParseAddr("203.0.113.66")},
		V6: HostAddrs{Host: netip.MustParseAddr("2001:db8:e::1"), Edge: netip.MustParseAddr("2001:db8:e::10"),
			Edge2: netip.MustParseAddr("2001:db8:e::11"), Stranger: netip.MustParseAddr("2001:db8:e::66"),
			Container: netip.MustParseAddr("fd00:d0c::2"),
			Host2:     netip.MustParseAddr("2001:db8:f::1"), Stranger2: netip.MustParseAddr("2001:db8:f::66")},
	}
	d.wire(t)
	d.dockerRules(suffix)
	P := strconv.Itoa(port)
	Serve(d.Container.Listen(":" + P))
	Serve(d.Edge.Listen(":" + P))
	return d
}

// wire makes the host's bridges (ext0 and ext1 outside, dock0 to the
// container) with its addresses, and links the other namespaces to them.
func (d *DockerHost) wire(t testing.TB) {
	h := d.Host
	h.Run("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	for _, br := range []string{"ext0", "ext1", "dock0"} {
		h.Run("ip", "link", "add", br, "type", "bridge")
		h.Run("ip", "link", "set", br, "up")
	}
	h.Run("ip", "addr", "add", "198.51.100.1/24", "dev", "ext0")
	h.Run("ip", "addr", "add", "2001:db8:e::1/64", "dev", "ext0", "nodad")
	h.Run("ip", "addr", "add", "203.0.113.1/24", "dev", "ext1")
	h.Run("ip", "addr", "add", "2001:db8:f::1/64", "dev", "ext1", "nodad")
	h.Run("ip", "addr", "add", "172.31.0.1/24", "dev", "dock0")
	h.Run("ip", "addr", "add", "fd00:d0c::1/64", "dev", "dock0", "nodad")
	for _, p := range []struct {
		ns      *Netns
		hostIf  string
		bridge  string
		addrs   []string
		gateway []string
	}{
		{d.Edge, "ve", "ext0", []string{"198.51.100.10/24", "198.51.100.11/24", "2001:db8:e::10/64", "2001:db8:e::11/64"}, nil},
		{d.Stranger, "vs", "ext0", []string{"198.51.100.66/24", "2001:db8:e::66/64"}, nil},
		{d.Stranger2, "vs2", "ext1", []string{"203.0.113.66/24", "2001:db8:f::66/64"}, nil},
		{d.Container, "vc", "dock0", []string{"172.31.0.2/24", "fd00:d0c::2/64"}, []string{"172.31.0.1", "fd00:d0c::1"}},
	} {
		Veth(t, p.ns, "eth0", h, p.hostIf)
		h.Run("ip", "link", "set", p.hostIf, "master", p.bridge, "up")
		for _, a := range p.addrs {
			args := []string{"addr", "add", a, "dev", "eth0"}
			if strings.Contains(a, ":") {
				args = append(args, "nodad")
			}
			p.ns.Run("ip", args...)
		}
		p.ns.Run("ip", "link", "set", "eth0", "up")
		for _, gw := range p.gateway {
			p.ns.Run("ip", "route", "add", "default", "via", gw)
		}
	}
}

// dockerRules writes, with iptables-<suffix>, the rules dockerd would
// for publishing d.Port, in both families.
func (d *DockerHost) dockerRules(suffix string) {
	h, P := d.Host, strconv.Itoa(d.Port)
	for _, fam := range []struct {
		cmd, ctr, dst, subnet string
	}{
		{"iptables" + suffix, "172.31.0.2", "172.31.0.2:" + P, "172.31.0.0/24"},
		{"ip6tables" + suffix, "fd00:d0c::2", "[fd00:d0c::2]:" + P, "fd00:d0c::/64"},
	} {
		for _, r := range [][]string{
			{"-N", "DOCKER-USER"},
			{"-A", "DOCKER-USER", "-j", "RETURN"},
			{"-P", "FORWARD", "DROP"},
			{"-A", "FORWARD", "-j", "DOCKER-USER"},
			{"-A", "FORWARD", "-o", "dock0", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"},
			{"-A", "FORWARD", "-d", fam.ctr, "!", "-i", "dock0", "-o", "dock0", "-p", "tcp", "--dport", P, "-j", "ACCEPT"},
			{"-A", "FORWARD", "-i", "dock0", "!", "-o", "dock0", "-j", "ACCEPT"},
			// -p Port:Port publishes on every local address, as dockerd's
			// DOCKER nat chain does.
			{"-t", "nat", "-A", "PREROUTING", "!", "-i", "dock0", "-m", "addrtype", "--dst-type", "LOCAL", "-p", "tcp", "--dport", P, "-j", "DNAT", "--to-destination", fam.dst},
			{"-t", "nat", "-A", "POSTROUTING", "-s", fam.subnet, "!", "-o", "dock0", "-j", "MASQUERADE"},
		} {
			h.Run(fam.cmd, r...)
		}
	}
}

// NeedDocker is Need for a running Docker engine: the docker client must
// be installed and `docker info` must answer.
func NeedDocker(t testing.TB) {
	t.Helper()
	NeedRoot(t)
	Need(t, "docker")
	if out, err := exec.Command(must(Path("docker")), "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("the Docker engine does not answer (docker info: %v: %s)", err, strings.TrimSpace(string(out)))
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg + " — skipped outside CI")
	}
}
