package deploy

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/internal/safefile"
	"golang.org/x/crypto/ssh"
)

// PushConfig is one push of an edge's binary, configuration and unit over
// SSH. NewPush fills it from the inventory; the caller adds Auth.
type PushConfig struct {
	Edge    string
	Addr    string           // host:port of the edge's sshd
	User    string           // needs to write /usr/local, /etc and run systemctl: root
	HostKey ssh.PublicKey    // pinned; a server presenting any other key is refused before anything is sent
	Auth    []ssh.AuthMethod // agent or key file, chosen by the caller
	Root    string           // prefix of every remote path: "" in production, a temp dir in tests
	Binary  string           // local edge binary
	SHA256  string           // when set, Binary must have this SHA-256 (deploy.binary_sha256)
	Files   *Rendering       // EdgeConfig and Unit to install
	Timeout time.Duration    // TCP connect and SSH handshake; 0: 30 s
	// Dial opens the TCP connection; nil is a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	Log  *slog.Logger // nil: discard
}

// PushResult is what a successful push left on the edge.
type PushResult struct {
	Installed string // edge-<sha256>, now running
	Previous  string // the binary it replaced ("" on the first push), kept for a rollback
	Uploaded  bool   // false when that binary was already on the host
	// Unchanged: the host already ran this binary, configuration and
	// unit, so the service was not restarted (Previous is "").
	Unchanged bool
}

// Exit statuses of scripts/activate.sh.
const (
	exitCheckFailed   = 3
	exitRestartFailed = 4
)

//go:embed scripts/activate.sh
var activateScript string

// NewPush prepares the push of the edge called name: its SSH target and
// pinned host key from the inventory, its files rendered as for cloud-init,
// the binary from deploy.binary.
func NewPush(c Config, name string) (PushConfig, error) {
	e, ok := c.Edge(name)
	if !ok {
		return PushConfig{}, fmt.Errorf("edge %q is not in the inventory", name)
	}
	p := PushConfig{Edge: e.Name, Binary: c.Deploy.Binary}
	var err error
	if p.User, p.Addr, err = ParseSSHTarget(e.SSH); err != nil {
		return p, fmt.Errorf("edge %s: ssh: %w", e.Name, err)
	}
	if p.HostKey, err = ParseHostKey(e.HostKey); err != nil {
		return p, fmt.Errorf("edge %s: host_key: %w", e.Name, err)
	}
	if c.Deploy.BinarySHA256 != "" {
		if p.SHA256, err = ParseSHA256(c.Deploy.BinarySHA256); err != nil {
			return p, fmt.Errorf("deploy.binary_sha256: %w", err)
		}
	}
	if err := c.Deploy.validate(c, false); err != nil {
		return p, err
	}
	// The push writes what cloud-init would; only the download is not
	// needed, so a pin-less inventory may still push.
	d := c
	if d.Deploy.BinaryURL == "" || d.Deploy.BinarySHA256 == "" {
		d.Deploy.BinaryURL, d.Deploy.BinarySHA256 = "https://unused.invalid/edge", strings.Repeat("0", 64)
	}
	if p.Files, err = Render(d, name); err != nil {
		return p, err
	}
	return p, nil
}

// ParseSSHTarget reads user@host[:port] (port 22, user root when absent;
// an IPv6 address with a port in brackets).
func ParseSSHTarget(s string) (user, addr string, err error) {
	bad := fmt.Errorf("%q is not user@host[:port]", s)
	user, host := "root", s
	if u, h, ok := strings.Cut(s, "@"); ok {
		user, host = u, h
	}
	if user == "" || strings.ContainsAny(user, "@ \t") {
		return "", "", bad
	}
	port := "22"
	if h, p, err := net.SplitHostPort(host); err == nil {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", "", bad
		}
		host, port = h, p
	} else if b, ok := strings.CutPrefix(host, "["); ok && strings.HasSuffix(b, "]") {
		if _, err := netip.ParseAddr(strings.TrimSuffix(b, "]")); err == nil {
			host = strings.TrimSuffix(b, "]")
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", "", bad
		}
	} else if host == "" || strings.ContainsAny(host, ":[]/ \t") {
		return "", "", bad
	}
	return user, net.JoinHostPort(host, port), nil
}

// ParseHostKey reads a pinned host key as ssh-keyscan prints it, with or
// without the leading host names ("203.0.113.10 ssh-ed25519 AAAA…" or
// "ssh-ed25519 AAAA… comment"): only the key is pinned, whatever the names.
func ParseHostKey(s string) (ssh.PublicKey, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("required: the edge's SSH host key (ssh-keyscan, or the VM's console)")
	}
	if k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(s)); err == nil {
		return k, nil
	}
	if _, _, k, _, _, err := ssh.ParseKnownHosts([]byte(s)); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("%q is not an SSH public key (type base64, optionally after host names)", short(s))
}

func short(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Push installs the edge binary, configuration and unit on the edge host
// and restarts the service:
//
//  1. the SSH handshake accepts only the pinned host key (and only offers
//     its algorithm), so a wrong host gets no byte of the files;
//  2. each file is uploaded beside its place (*.new), fsynced, and its
//     SHA-256 read back from the host;
//  3. the new binary checks the new configuration (edge --check); if it
//     refuses, the uploads are deleted and nothing in use was touched;
//  4. configuration and unit are renamed into place (the old ones kept as
//     *.prev), the link /usr/local/bin/edgefleet-edge is switched to
//     edge-<sha256> by one rename, and the service restarted; a failed
//     restart puts the previous link, configuration and unit back, and
//     its error says why. When the host already runs these very files
//     (and the service is active), nothing is renamed or restarted: a
//     restart would cut every connection the edge holds.
func Push(ctx context.Context, p PushConfig) (PushResult, error) {
	var res PushResult
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if p.Files == nil || p.HostKey == nil {
		return res, errors.New("push: files and host key are required")
	}
	bin, sum, err := p.openBinary()
	if err != nil {
		return res, err
	}
	defer bin.Close()

	client, err := p.connect(ctx)
	if err != nil {
		return res, err
	}
	defer client.Close()
	// Cancelling ctx ends the remote commands too (a restart may wait out
	// the old edge's drain_timeout).
	defer context.AfterFunc(ctx, func() { client.Close() })()
	start := time.Now()

	root := strings.TrimSuffix(p.Root, "/")
	if res.Uploaded, err = p.upload(client, root, bin, sum); err != nil {
		return res, err
	}
	if err := p.activate(client, root, sum, &res); err != nil {
		return res, err
	}
	log.Info("edge pushed", "edge", p.Edge, "target", p.Addr, "installed", res.Installed, "previous", res.Previous,
		"uploaded", res.Uploaded, "unchanged", res.Unchanged, "duration", time.Since(start))
	return res, nil
}

// openBinary opens the edge binary and hashes it, refusing one that is
// not the pinned SHA-256 (deploy.binary_sha256) when one is.
func (p PushConfig) openBinary() (*os.File, string, error) {
	bin, _, err := safefile.Open(p.Binary)
	if err != nil {
		return nil, "", fmt.Errorf("edge binary: %w", err)
	}
	sum, err := fileSHA256(bin)
	if err != nil {
		bin.Close()
		return nil, "", fmt.Errorf("edge binary %s: %w", p.Binary, err)
	}
	if p.SHA256 != "" && sum != p.SHA256 {
		bin.Close()
		return nil, "", fmt.Errorf("edge binary %s has SHA-256 %s, deploy.binary_sha256 pins %s", p.Binary, sum, p.SHA256)
	}
	return bin, sum, nil
}

// upload puts the files beside their places under root (step 2 of
// Push): the binary only when the host does not hold it already (which
// uploaded reports, also with an error after it), configuration and
// unit as *.new, the metrics token in place.
func (p PushConfig) upload(client *ssh.Client, root string, bin *os.File, sum string) (uploaded bool, err error) {
	binPath := root + BinDir + "/edge-" + sum
	have, _ := runRemote(client, "sha256sum "+shellQuote(binPath)+" 2>/dev/null || true", nil)
	if !strings.HasPrefix(have, sum+" ") {
		if _, err := bin.Seek(0, io.SeekStart); err != nil {
			return false, err
		}
		if err := put(client, root+BinDir+"/.edge-"+sum+".new", 0o755, bin, sum); err != nil {
			return false, fmt.Errorf("edge %s: upload binary: %w", p.Edge, err)
		}
		uploaded = true
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{root + ConfigPath, p.Files.EdgeConfig}, {root + UnitPath, p.Files.Unit}} {
		h := sha256.Sum256(f.data)
		if err := put(client, f.path+".new", 0o644, bytes.NewReader(f.data), hex.EncodeToString(h[:])); err != nil {
			return uploaded, fmt.Errorf("edge %s: upload %s: %w", p.Edge, path.Base(f.path), err)
		}
	}

	if tok := p.Files.MetricsToken; tok != nil {
		// In place before the switch: the new configuration's --check
		// reads it, and a rollback keeps a token the old one ignores or
		// shares.
		h := sha256.Sum256(tok)
		if err := put(client, root+MetricsTokenPath, 0o600, bytes.NewReader(tok), hex.EncodeToString(h[:])); err != nil {
			return uploaded, fmt.Errorf("edge %s: upload %s: %w", p.Edge, path.Base(MetricsTokenPath), err)
		}
	}
	return uploaded, nil
}

// activate runs the activation script (steps 3 and 4 of Push) and
// records in res what it installed, replaced or left unchanged.
func (p PushConfig) activate(client *ssh.Client, root, sum string, res *PushResult) error {
	script := "sh -c " + shellQuote(activateScript) + " activate " + shellQuote(root) + " " + sum
	out, err := runRemote(client, script, nil)
	var re *remoteError
	switch {
	case errors.As(err, &re) && re.ExitStatus() == exitCheckFailed:
		return fmt.Errorf("edge %s: the new binary refused the new configuration, nothing changed: %s", p.Edge, lastLine(re.stderr))
	case errors.As(err, &re) && re.ExitStatus() == exitRestartFailed:
		return fmt.Errorf("edge %s: %s", p.Edge, lastLine(re.stderr))
	case err != nil:
		return fmt.Errorf("edge %s: activate: %w", p.Edge, err)
	}
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "unchanged "); ok {
			res.Installed, res.Unchanged = v, true
		} else if v, ok := strings.CutPrefix(l, "installed "); ok {
			res.Installed = v
		} else if v, ok := strings.CutPrefix(l, "previous "); ok && v != "none" {
			res.Previous = v
		}
	}
	return nil
}

// connect dials and completes the SSH handshake, accepting only the
// pinned host key.
func (p PushConfig) connect(ctx context.Context) (*ssh.Client, error) {
	return sshConnect(ctx, sshTarget{What: "edge " + p.Edge, Addr: p.Addr, User: p.User, HostKey: p.HostKey, Auth: p.Auth,
		Timeout: p.Timeout, Dial: p.Dial})
}

// sshTarget is a host fleet logs into: an edge (push) or an origin host
// (its firewall).
type sshTarget struct {
	What    string // "edge e1": the errors' subject ("": the caller names it)
	Addr    string
	User    string
	HostKey ssh.PublicKey
	Auth    []ssh.AuthMethod
	Timeout time.Duration // 0: 30 s
	Dial    func(ctx context.Context, network, addr string) (net.Conn, error)
}

// sshConnect dials t and completes the SSH handshake, accepting only the
// pinned host key.
func sshConnect(ctx context.Context, t sshTarget) (*ssh.Client, error) {
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dial := t.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	what := t.What + ": "
	if t.What == "" {
		what = ""
	}
	conn, err := dial(ctx, "tcp", t.Addr)
	if err != nil {
		return nil, fmt.Errorf("%sdial %s: %w", what, t.Addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	pinned := t.HostKey
	cfg := &ssh.ClientConfig{
		User:              t.User,
		Auth:              t.Auth,
		HostKeyAlgorithms: hostKeyAlgorithms(pinned),
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if !bytes.Equal(key.Marshal(), pinned.Marshal()) {
				return fmt.Errorf("host key mismatch: the server presented %s %s, fleet.yaml pins %s",
					key.Type(), ssh.FingerprintSHA256(key), ssh.FingerprintSHA256(pinned))
			}
			return nil
		},
	}
	c, chans, reqs, err := ssh.NewClientConn(conn, t.Addr, cfg)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%sssh %s@%s: %w", what, t.User, t.Addr, err)
	}
	conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

// hostKeyAlgorithms makes the server show the pinned key rather than
// another of its keys: one type, and for RSA its SHA-2 signatures.
func hostKeyAlgorithms(k ssh.PublicKey) []string {
	if k.Type() == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}
	}
	return []string{k.Type()}
}

// put uploads r to the remote file name (its directory created), fsyncs
// it and checks the SHA-256 the host reads back.
func put(c *ssh.Client, name string, mode os.FileMode, r io.Reader, sum string) error {
	q := shellQuote(name)
	umask := "022"
	if mode&0o077 == 0 { // a secret: never readable by others, not even while it is written
		umask = "077"
	}
	cmd := fmt.Sprintf("set -eu; umask 022; mkdir -p %s; umask %s; cat > %s; chown 0:0 %s; chmod %04o %s; sync %s; sha256sum %s",
		shellQuote(path.Dir(name)), umask, q, q, mode, q, q, q)
	out, err := runRemote(c, cmd, r)
	if err != nil {
		return err
	}
	if got, _, _ := strings.Cut(out, " "); got != sum {
		return fmt.Errorf("%s arrived with SHA-256 %q, sent %s", name, got, sum)
	}
	return nil
}

// runRemote runs cmd in a new session and returns its stdout; a failure
// carries the last line of stderr.
func runRemote(c *ssh.Client, cmd string, stdin io.Reader) (string, error) {
	s, err := c.NewSession()
	if err != nil {
		return "", fmt.Errorf("ssh session: %w", err)
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdin, s.Stdout, s.Stderr = stdin, &stdout, &stderr
	if err := s.Run(cmd); err != nil {
		var exit *ssh.ExitError
		if errors.As(err, &exit) {
			return stdout.String(), &remoteError{exit, strings.TrimSpace(stderr.String())}
		}
		return stdout.String(), err
	}
	return stdout.String(), nil
}

// remoteError is a remote command's non-zero exit with its stderr.
type remoteError struct {
	*ssh.ExitError
	stderr string
}

func (e *remoteError) Error() string {
	return fmt.Sprintf("exit status %d: %s", e.ExitStatus(), lastLine(e.stderr))
}

func (e *remoteError) Unwrap() error { return e.ExitError }

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func fileSHA256(f *os.File) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
