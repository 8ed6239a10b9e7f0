package testbed

import (
	"crypto/sha1"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The directory every slapd started here serves (see DirectoryLDIF).
const (
	Suffix = "dc=example,dc=com"
	RootDN = "cn=admin,dc=example,dc=com"
	RootPW = "secret"
)

// User is the DN of test user name (uid=name,ou=people,dc=example,dc=com);
// its password is name+"-pw".
func User(name string) string { return "uid=" + name + ",ou=people," + Suffix }

// DirectoryLDIF is the LDIF loaded into every test slapd: the suffix,
// ou=people with the users alice, bob and carol (password "<name>-pw"), and
// n more entries uid=userNNNNN under ou=bulk for large searches.
func DirectoryLDIF(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "dn: %s\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n", Suffix)
	fmt.Fprintf(&b, "dn: ou=people,%s\nobjectClass: organizationalUnit\nou: people\n\n", Suffix)
	fmt.Fprintf(&b, "dn: ou=bulk,%s\nobjectClass: organizationalUnit\nou: bulk\n\n", Suffix)
	fmt.Fprintf(&b, "dn: ou=writes,%s\nobjectClass: organizationalUnit\nou: writes\n\n", Suffix)
	for _, u := range []string{"alice", "bob", "carol"} {
		fmt.Fprintf(&b, "dn: %s\nobjectClass: inetOrgPerson\nuid: %s\ncn: %s\nsn: %s\nuserPassword: %s-pw\n\n", User(u), u, u, u, u)
	}
	for i := range n {
		fmt.Fprintf(&b, "dn: uid=user%05d,ou=bulk,%s\nobjectClass: inetOrgPerson\nuid: user%05d\ncn: User %d\nsn: %d\ndescription: %s\n\n",
			i, Suffix, i, i, i, strings.Repeat("x", 200))
	}
	return b.String()
}

// SlapdConfig describes one slapd.
type SlapdConfig struct {
	// LDIF is loaded with slapadd before the first start (DirectoryLDIF(0)
	// when empty). Ignored for a proxy.
	LDIF string
	// Proxy, when set, makes this slapd a back-ldap proxy to these URLs
	// (ldap://host:port) instead of an mdb directory.
	Proxy []string
	// Threads is slapd's thread count (0: slapd's default).
	Threads int
	// Allow lists features for slapd's global "allow" directive (such as
	// bind_anon_cred).
	Allow []string
	// AuthzPolicy is slapd's authz-policy (such as "to", for proxied
	// authorization by the authzTo of the requester's entry); "" leaves
	// slapd's default, none.
	AuthzPolicy string
	// TLSCert and TLSKey (PEM files), when set, make slapd serve LDAPS
	// (URL is then ldaps://…).
	TLSCert, TLSKey string
	// Netns, when set, runs slapd inside that namespace (Addr is then its
	// loopback).
	Netns *Netns
	// SyncProv loads the syncprov overlay on the directory, so that it
	// serves syncrepl consumers and persistent searches (RFC 4533). Give
	// replicas the same entryUUIDs (ReplicaLDIF), as replication would.
	SyncProv bool
	// Consumer, when set, makes this slapd a syncrepl consumer of the
	// provider at this URL (ldap://host:port): refreshAndPersist of the
	// whole suffix, bound as RootDN, retrying every second. Its directory
	// starts empty (LDIF is ignored).
	Consumer string
	// Limits are slapd "limits" clauses for the directory, e.g.
	// "* size.pr=1000".
	Limits []string
	// Conf, when set, is the whole slapd.conf, written as it is (its
	// directory must be Dir's "db"); the fields above but LDIF and Netns
	// are then unused, and LDIF is loaded only when set (an empty one
	// leaves the directory empty, for a replica that takes it from a
	// provider).
	Conf string
	// Addr is the 127.0.0.1:port to serve; empty: a free port. Replicas
	// that name each other pick their ports first.
	Addr string
}

// ReplicaLDIF gives every entry of ldif the entryUUID and entryCSN a
// replica of the same directory has: derived from its DN, and one CSN
// for all, so that syncrepl sees two directories loaded from it as one.
func ReplicaLDIF(ldif string) string {
	var b strings.Builder
	for _, e := range strings.Split(strings.TrimSpace(ldif), "\n\n") {
		dn, _, _ := strings.Cut(e, "\n")
		sum := sha1.Sum([]byte(strings.ToLower(dn)))
		fmt.Fprintf(&b, "%s\nentryUUID: %x-%x-%x-%x-%x\nentryCSN: 20260101000000.000000Z#000000#000#000000\n\n",
			e, sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	}
	return b.String()
}

// Slapd is one slapd process serving ldap://Addr/ from Dir. Stop or Kill
// it to simulate an outage; Start brings it back on the same address with
// the same data.
type Slapd struct {
	Addr string // 127.0.0.1:port
	URL  string // ldap://127.0.0.1:port
	Dir  string

	ns   *Netns // nil: this machine's own namespace
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  *Buffer
}

// NewSlapd writes the configuration into dir (which must exist), loads the
// data and starts slapd on a free loopback port. It needs no test, so
// benchmarks use it too; Close stops it.
func NewSlapd(dir string, cfg SlapdConfig) (*Slapd, error) {
	s := &Slapd{Dir: dir, out: &Buffer{}, ns: cfg.Netns, Addr: cfg.Addr}
	if s.Addr == "" {
		port, err := LowPort("127.0.0.1")
		if err != nil {
			return nil, err
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	s.URL = "ldap://" + s.Addr
	if cfg.TLSCert != "" {
		s.URL = "ldaps://" + s.Addr
	}
	conf := cfg.Conf
	if conf == "" {
		conf = slapdConf(dir, cfg)
	}
	if err := os.WriteFile(filepath.Join(dir, "slapd.conf"), []byte(conf), 0o600); err != nil {
		return nil, err
	}
	if cfg.Conf != "" {
		if err := os.MkdirAll(filepath.Join(dir, "db"), 0o700); err != nil {
			return nil, err
		}
		if cfg.LDIF != "" {
			if err := slapadd(dir, cfg.LDIF); err != nil {
				return nil, err
			}
		}
	} else if len(cfg.Proxy) == 0 {
		if err := os.MkdirAll(filepath.Join(dir, "db"), 0o700); err != nil {
			return nil, err
		}
		ldif := cfg.LDIF
		if ldif == "" {
			ldif = DirectoryLDIF(0)
		}
		// A consumer's directory comes from its provider.
		if cfg.Consumer == "" {
			if err := slapadd(dir, ldif); err != nil {
				return nil, err
			}
		}
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// slapadd loads ldif into the directory configured in dir.
func slapadd(dir, ldif string) error {
	lp := filepath.Join(dir, "data.ldif")
	if err := os.WriteFile(lp, []byte(ldif), 0o600); err != nil {
		return err
	}
	bin, err := Path("slapadd")
	if err != nil {
		return err
	}
	// -q: quick mode (no consistency checks), much faster for bulk data.
	if out, err := exec.Command(bin, "-q", "-f", filepath.Join(dir, "slapd.conf"), "-l", lp).CombinedOutput(); err != nil {
		return fmt.Errorf("slapadd: %v: %s", err, out)
	}
	return nil
}

func slapdConf(dir string, cfg SlapdConfig) string {
	var b strings.Builder
	for _, sc := range []string{"core", "cosine", "inetorgperson"} {
		fmt.Fprintf(&b, "include /etc/ldap/schema/%s.schema\n", sc)
	}
	fmt.Fprintf(&b, "pidfile %s\nargsfile %s\n", filepath.Join(dir, "slapd.pid"), filepath.Join(dir, "slapd.args"))
	b.WriteString("modulepath /usr/lib/ldap\n")
	if cfg.Threads > 0 {
		fmt.Fprintf(&b, "threads %d\n", cfg.Threads)
	}
	if len(cfg.Allow) > 0 {
		fmt.Fprintf(&b, "allow %s\n", strings.Join(cfg.Allow, " "))
	}
	if cfg.AuthzPolicy != "" {
		fmt.Fprintf(&b, "authz-policy %s\n", cfg.AuthzPolicy)
	}
	if cfg.TLSCert != "" {
		fmt.Fprintf(&b, "TLSCertificateFile %s\nTLSCertificateKeyFile %s\n", cfg.TLSCert, cfg.TLSKey)
	}
	if len(cfg.Proxy) > 0 {
		b.WriteString("moduleload back_ldap\n")
		fmt.Fprintf(&b, "database ldap\nsuffix %q\nuri %q\n", Suffix, strings.Join(cfg.Proxy, " "))
		b.WriteString("rebind-as-user yes\nidassert-bind bindmethod=none\nsizelimit unlimited\n")
		return b.String()
	}
	b.WriteString("moduleload back_mdb\n")
	if cfg.SyncProv {
		b.WriteString("moduleload syncprov\n")
	}
	// SASL CRAM-MD5 and DIGEST-MD5 against the cleartext userPassword of
	// uid=<name>,ou=people.
	fmt.Fprintf(&b, "sasl-auxprops slapd\nauthz-regexp \"uid=([^,]*),cn=[^,]*,cn=auth\" \"uid=$1,ou=people,%s\"\n", Suffix)
	fmt.Fprintf(&b, "database mdb\nmaxsize 1073741824\nsuffix %q\nrootdn %q\nrootpw %s\ndirectory %s\n",
		Suffix, RootDN, RootPW, filepath.Join(dir, "db"))
	b.WriteString("sizelimit unlimited\nindex objectClass eq\nindex uid eq\n")
	for _, l := range cfg.Limits {
		fmt.Fprintf(&b, "limits %s\n", l)
	}
	if cfg.SyncProv || cfg.Consumer != "" {
		b.WriteString("index entryUUID,entryCSN eq\n")
	}
	if cfg.Consumer != "" {
		fmt.Fprintf(&b, "syncrepl rid=001 provider=%s type=refreshAndPersist retry=\"1 +\" searchbase=%q bindmethod=simple binddn=%q credentials=%s\n",
			cfg.Consumer, Suffix, RootDN, RootPW)
	}
	b.WriteString("access to attrs=userPassword by self write by anonymous auth by * none\n")
	fmt.Fprintf(&b, "access to dn.subtree=%q by users write by * read\n", "ou=writes,"+Suffix)
	b.WriteString("access to * by * read\n")
	if cfg.SyncProv {
		b.WriteString("overlay syncprov\n")
	}
	return b.String()
}

// LowPort returns a port free on ip right now, below the kernel's
// ephemeral range (32768 and up). A server that binds later (slapd) must
// not get a port from that range: a client connection of any other test
// may hold it as its source port by then (TIME_WAIT included), and slapd's
// bind would fail.
func LowPort(ip string) (int, error) {
	for range 200 {
		port := 20000 + rand.IntN(12000)
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err == nil {
			ln.Close()
			return port, nil
		}
	}
	return 0, errors.New("no free port in 20000-31999")
}

// Start starts a stopped slapd on its address and waits until it accepts
// connections.
func (s *Slapd) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	slapd, err := Path("slapd")
	if err != nil {
		return err
	}
	// -d 0 keeps slapd in the foreground without debug output.
	args := []string{"-h", s.URL + "/", "-f", filepath.Join(s.Dir, "slapd.conf"), "-d", "0"}
	cmd := exec.Command(slapd, args...)
	dial := func() (net.Conn, error) { return net.DialTimeout("tcp", s.Addr, 200*time.Millisecond) }
	if s.ns != nil {
		// ip netns exec execs slapd itself: the process is slapd, so the
		// signals of Stop, Kill and Freeze reach it.
		cmd = s.ns.Command(slapd, args...)
		dial = func() (net.Conn, error) { return s.ns.Dial("", s.Addr, 200*time.Millisecond) }
	}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start slapd: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := dial()
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-done:
			return fmt.Errorf("slapd on %s exited: %s", s.Addr, s.out.String())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("slapd on %s not accepting after 10s: %s", s.Addr, s.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd, s.done = cmd, done
	return nil
}

// Stop shuts slapd down (SIGTERM, then SIGKILL after five seconds) and
// waits for it; its port refuses connections afterwards.
func (s *Slapd) Stop() { s.stop(syscall.SIGTERM) }

// Kill kills slapd at once (SIGKILL): its open connections are reset
// mid-operation, like a crashed server.
func (s *Slapd) Kill() { s.stop(syscall.SIGKILL) }

func (s *Slapd) stop(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd, s.done = nil, nil
}

// Freeze stops slapd with SIGSTOP: connections stay open and requests
// are accepted into socket buffers but never answered, until Thaw or Kill. It
// returns once every thread of slapd is stopped.
func (s *Slapd) Freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	s.cmd.Process.Signal(syscall.SIGSTOP)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if allStopped(pid) {
			return
		}
	}
}

// Thaw resumes a frozen slapd (SIGCONT): it reads what waited in its
// socket buffers and answers.
func (s *Slapd) Thaw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// allStopped reports whether every thread of pid is in state T.
func allStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			return false
		}
		// pid (comm) STATE …; comm may contain spaces, so cut at the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

// Close stops slapd.
func (s *Slapd) Close() { s.Stop() }

// Output is what slapd wrote so far.
func (s *Slapd) Output() string { return s.out.String() }

// StartSlapds starts n slapd directories loaded with the same LDIF, each
// in its own temp dir, stopped when the test ends.
func StartSlapds(t testing.TB, n int, cfg SlapdConfig) []*Slapd {
	t.Helper()
	Need(t, "slapd", "slapadd")
	out := make([]*Slapd, n)
	for i := range out {
		out[i] = StartSlapd(t, t.TempDir(), cfg)
	}
	return out
}

// StartSlapd starts one slapd from dir (NewSlapd), stopped when the test
// ends, its output logged when the test failed.
func StartSlapd(t testing.TB, dir string, cfg SlapdConfig) *Slapd {
	t.Helper()
	s, err := NewSlapd(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("output of slapd %s:\n%s", s.Addr, s.Output())
		}
	})
	return s
}

// BlackHole returns a loopback address whose SYNs go unanswered, like a
// host that is down or a firewall that drops: a listener with a full
// accept queue that never accepts. Connecting to it blocks until the
// dialer's timeout.
func BlackHole(t testing.TB) string { return BlackHoleAt(t, "127.0.0.1:0") }

// BlackHoleAt is BlackHole on a given IPv4 address and port (port 0: any),
// e.g. one address of an A set whose edges share a port.
func BlackHoleAt(t testing.TB, addr string) string {
	t.Helper()
	addr, closeFn, err := NewBlackHoleAt(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return addr
}

// NewBlackHoleAt is BlackHoleAt without a test.
func NewBlackHoleAt(at string) (addr string, closeFn func(), err error) {
	ap, err := netip.ParseAddrPort(at)
	if err != nil || !ap.Addr().Is4() {
		return "", nil, fmt.Errorf("black hole at %q: want an IPv4 ip:port", at)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}); err != nil {
		unix.Close(fd)
		return "", nil, fmt.Errorf("black hole at %s: %w", at, err)
	}
	// Backlog 0: the accept queue holds one connection; once it is full
	// Linux drops further SYNs instead of answering them.
	if err := unix.Listen(fd, 0); err != nil {
		unix.Close(fd)
		return "", nil, err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return "", nil, err
	}
	addr = net.JoinHostPort(ap.Addr().String(), strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
	var fillers []net.Conn
	closeFn = func() {
		for _, c := range fillers {
			c.Close()
		}
		unix.Close(fd)
	}
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return addr, closeFn, nil // the queue is full: SYNs are dropped now
			}
			closeFn()
			return "", nil, err
		}
		fillers = append(fillers, c)
	}
	closeFn()
	return "", nil, errors.New("black hole: accept queue never filled")
}

// Silent returns a loopback address that accepts TCP connections and
// never answers a byte: a hung server rather than a missing one.
func Silent(t testing.TB) string {
	t.Helper()
	return SilentAt(t, "127.0.0.1:0")
}

// SilentAt is Silent on a given address (port 0: any free one).
func SilentAt(t testing.TB, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ServeHeld(t, ln, nil)
	return ln.Addr().String()
}

// PoolSlapdConf is the slapd.conf of docs/origin-pool.md (doc, the page's
// path from the calling test's package) for the provider with serverID id
// in dir, replicating from peer (an ldap:// URL): the page's block with
// only its paths, its peer and its serverID changed, so that the tests
// run the configuration operators copy.
func PoolSlapdConf(t testing.TB, doc, dir string, id int, peer string) string {
	t.Helper()
	raw, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(raw), "```slapd.conf\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatalf("%s has no ```slapd.conf block", doc)
	}
	for _, r := range [][2]string{
		{"/run/slapd", dir},
		{"/var/lib/ldap", filepath.Join(dir, "db")},
		{"ldap://ldap-b.internal:389", peer},
		{"serverID 1\n", fmt.Sprintf("serverID %d\n", id)},
	} {
		if !strings.Contains(block, r[0]) {
			t.Fatalf("%s's slapd.conf has no %q", doc, r[0])
		}
		block = strings.ReplaceAll(block, r[0], r[1])
	}
	return block
}

// ReplicatorLDIF is the replication account docs/origin-pool.md says to
// load with the directory.
const ReplicatorLDIF = "dn: cn=replicator,dc=example,dc=com\nobjectClass: simpleSecurityObject\nobjectClass: organizationalRole\ncn: replicator\nuserPassword: replicator-secret\n\n"
