package testbed

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// NamedConfig describes one BIND 9 named serving one zone.
type NamedConfig struct {
	// Zone is the zone served ("example.test", trailing dot optional).
	Zone string
	// Records are extra resource records for the zone file, one per entry
	// in zone-file syntax ("www 300 IN A 192.0.2.1"); SOA and NS are made.
	Records []string
	// Names, when set, limit what the TSIG key may update to these names
	// (update-policy "grant key name NAME ANY"); empty: any name in the
	// zone (zonesub).
	Names []string
	// IP is the address named listens on (127.0.0.1 when empty).
	IP string
	// Netns, when set, runs named inside that namespace; IP must then be
	// an address of the namespace.
	Netns *Netns
}

// Named is a running BIND 9 named, authoritative for Zone, accepting RFC
// 2136 updates signed with its TSIG key.
type Named struct {
	Addr string // ip:port, UDP and TCP
	Zone string // fully qualified, with the trailing dot
	Dir  string

	// KeyName, KeyAlgorithm and KeySecret are the TSIG key tsig-keygen
	// made ("fleet-key.", "hmac-sha256.", base64 secret).
	KeyName, KeyAlgorithm, KeySecret string
	// KeyFile holds the key as tsig-keygen printed it (a named.conf key
	// clause, also what nsupdate -k reads).
	KeyFile string

	Proc *Proc
	cfg  NamedConfig
}

func init() { packages["tsig-keygen"] = "bind9" }

// keyClause matches what tsig-keygen prints.
var keyClause = regexp.MustCompile(`key "([^"]+)" \{\s*algorithm ([^;]+);\s*secret "([^"]+)";`)

// ParseTSIGKey reads the key name, algorithm and secret from a key clause
// as tsig-keygen prints it.
func ParseTSIGKey(clause string) (name, algorithm, secret string, err error) {
	m := keyClause.FindStringSubmatch(clause)
	if m == nil {
		return "", "", "", fmt.Errorf("no key clause in %q", clause)
	}
	return dns.Fqdn(m[1]), dns.Fqdn(m[2]), m[3], nil
}

// StartNamed writes a zone file, a TSIG key (tsig-keygen -a hmac-sha256)
// and a named.conf into a temp dir, starts named in the foreground on a
// free port and waits until it answers the zone's SOA. It is stopped when
// the test ends.
func StartNamed(t testing.TB, cfg NamedConfig) *Named {
	t.Helper()
	Need(t, "named", "tsig-keygen")
	if cfg.IP == "" {
		cfg.IP = "127.0.0.1"
	}
	n := &Named{Zone: dns.Fqdn(cfg.Zone), Dir: t.TempDir(), cfg: cfg}
	keygen, _ := Path("tsig-keygen")
	out, err := exec.Command(keygen, "-a", "hmac-sha256", "fleet-key").Output()
	if err != nil {
		t.Fatalf("tsig-keygen: %v", err)
	}
	if n.KeyName, n.KeyAlgorithm, n.KeySecret, err = ParseTSIGKey(string(out)); err != nil {
		t.Fatalf("tsig-keygen: %v", err)
	}
	n.KeyFile = WriteFile(t, n.Dir, "fleet.key", string(out))
	WriteFile(t, n.Dir, "zone.db", n.zoneFile())
	// named binds after this returns: a port below the ephemeral range
	// cannot meanwhile be some client's source port.
	var port int
	do := func(fn func() error) error { return fn() }
	if cfg.Netns != nil {
		do = cfg.Netns.Do
	}
	if err := do(func() error {
		var err error
		port, err = lowPortUDP(cfg.IP)
		return err
	}); err != nil {
		t.Fatalf("named port: %v", err)
	}
	n.Addr = net.JoinHostPort(cfg.IP, strconv.Itoa(port))
	conf := WriteFile(t, n.Dir, "named.conf", n.conf(port))
	bin, _ := Path("named")
	// -g: foreground, log to stderr; as root without -u named keeps root.
	args := []string{"-g", "-c", conf}
	if strings.Contains(cfg.IP, ":") {
		args = append(args, "-6")
	} else {
		args = append(args, "-4")
	}
	cmd := exec.Command(bin, args...)
	if cfg.Netns != nil {
		cmd = cfg.Netns.Command(bin, args...)
	}
	cmd.Dir = n.Dir
	n.Proc = StartCmd(t, cmd)
	n.waitReady(t, 15*time.Second)
	return n
}

// lowPortUDP is LowPort for a port free on both TCP and UDP.
func lowPortUDP(ip string) (int, error) {
	for range 50 {
		port, err := LowPort(ip)
		if err != nil {
			return 0, err
		}
		pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err == nil {
			pc.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no port free on tcp and udp on %s", ip)
}

func (n *Named) zoneFile() string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ORIGIN %s\n$TTL 300\n", n.Zone)
	fmt.Fprintf(&b, "@ IN SOA ns1.%s hostmaster.%s 1 3600 600 86400 60\n", n.Zone, n.Zone)
	fmt.Fprintf(&b, "@ IN NS ns1.%s\n", n.Zone)
	ip := n.cfg.IP
	if strings.Contains(ip, ":") {
		fmt.Fprintf(&b, "ns1 IN AAAA %s\n", ip)
	} else {
		fmt.Fprintf(&b, "ns1 IN A %s\n", ip)
	}
	for _, r := range n.cfg.Records {
		b.WriteString(r + "\n")
	}
	return b.String()
}

func (n *Named) conf(port int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "include %q;\n", n.KeyFile)
	b.WriteString("options {\n")
	fmt.Fprintf(&b, "  directory %q;\n", n.Dir)
	fmt.Fprintf(&b, "  pid-file %q;\n", filepath.Join(n.Dir, "named.pid"))
	fmt.Fprintf(&b, "  session-keyfile %q;\n", filepath.Join(n.Dir, "session.key"))
	fmt.Fprintf(&b, "  managed-keys-directory %q;\n", n.Dir)
	if strings.Contains(n.cfg.IP, ":") {
		fmt.Fprintf(&b, "  listen-on { none; };\n  listen-on-v6 port %d { %s; };\n", port, n.cfg.IP)
	} else {
		fmt.Fprintf(&b, "  listen-on port %d { %s; };\n  listen-on-v6 { none; };\n", port, n.cfg.IP)
	}
	b.WriteString("  recursion no;\n  dnssec-validation no;\n  notify no;\n  allow-transfer { none; };\n")
	b.WriteString("};\ncontrols { };\n")
	fmt.Fprintf(&b, "zone %q {\n  type primary;\n  file %q;\n", n.Zone, filepath.Join(n.Dir, "zone.db"))
	b.WriteString("  update-policy {\n")
	if len(n.cfg.Names) == 0 {
		fmt.Fprintf(&b, "    grant %s zonesub ANY;\n", n.KeyName)
	}
	for _, name := range n.cfg.Names {
		fmt.Fprintf(&b, "    grant %s name %s ANY;\n", n.KeyName, dns.Fqdn(name))
	}
	b.WriteString("  };\n};\n")
	return b.String()
}

// waitReady waits until named answers the zone's SOA authoritatively.
func (n *Named) waitReady(t testing.TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := n.Exchange(new(dns.Msg).SetQuestion(n.Zone, dns.TypeSOA))
		if err == nil && r.Rcode == dns.RcodeSuccess && r.Authoritative && len(r.Answer) == 1 {
			return
		}
		if n.Proc.Cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("named on %s not answering %s SOA after %v: %v %v\n%s", n.Addr, n.Zone, within, r, err, n.Proc.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Exchange sends m to named over UDP (from inside its namespace when it
// has one) and returns the answer.
func (n *Named) Exchange(m *dns.Msg) (*dns.Msg, error) {
	c := &dns.Client{Timeout: time.Second}
	var r *dns.Msg
	exchange := func() error {
		var err error
		r, _, err = c.Exchange(m, n.Addr)
		return err
	}
	if n.cfg.Netns != nil {
		return r, n.cfg.Netns.Do(exchange)
	}
	return r, exchange()
}

// Dig runs dig against named (+short and the like are up to args) and
// returns its output; it fails the test when dig fails.
func (n *Named) Dig(t testing.TB, args ...string) string {
	t.Helper()
	Need(t, "dig")
	host, port, _ := net.SplitHostPort(n.Addr)
	all := append([]string{"@" + host, "-p", port, "+time=2", "+tries=2"}, args...)
	bin, _ := Path("dig")
	cmd := exec.Command(bin, all...)
	if n.cfg.Netns != nil {
		cmd = n.cfg.Netns.Command(bin, all...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dig %s: %v\n%s", strings.Join(all, " "), err, out)
	}
	return string(out)
}

// WrongKeySecret is a valid-looking TSIG secret named does not know.
const WrongKeySecret = "c2VjcmV0LXRoYXQtbmFtZWQtZG9lcy1ub3Qta25vdw=="
