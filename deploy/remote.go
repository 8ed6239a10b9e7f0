package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgefleet/edgefleet/firewall"
	"golang.org/x/crypto/ssh"
)

// RemoteFirewall is an origin host's firewall reached over SSH with its
// pinned host key, as push reaches an edge: each call logs in and runs
// `fleet firewall host` there (ServeHost), which drives that host's
// iptables through the same code as a local firewall. The allowed set is
// computed here, under this host's lock; the far side only applies it.
type RemoteFirewall struct {
	Name    string        // the origin host's name
	Addr    string        // host:port of its sshd
	User    string        // must run iptables: root
	HostKey ssh.PublicKey // pinned
	Auth    []ssh.AuthMethod
	// Command is the remote command line, e.g. "fleet firewall host
	// --backend auto --chain INPUT".
	Command string
	Base    firewall.Config // the host's chain, ports, pin and owner
	Timeout time.Duration   // TCP connect and SSH handshake; 0: 30 s
	// Dial opens the TCP connection; nil is a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu   sync.Mutex
	kept []*session // the sessions of changes whose undo may still come
}

// NewRemoteFirewall is the firewall of origin host h, with base as its
// rules' configuration and command as what runs there.
func NewRemoteFirewall(h Origin, base firewall.Config, command string, auth []ssh.AuthMethod, timeout time.Duration) (*RemoteFirewall, error) {
	r := &RemoteFirewall{Name: h.Name, Auth: auth, Command: command, Base: base, Timeout: timeout}
	var err error
	if r.User, r.Addr, err = ParseSSHTarget(h.SSH); err != nil {
		return nil, fmt.Errorf("ssh: %w", err)
	}
	if r.HostKey, err = ParseHostKey(h.HostKey); err != nil {
		return nil, fmt.Errorf("host_key: %w", err)
	}
	return r, nil
}

// hostRequest is one line ServeHost reads: an operation on the rules for
// Edges under Base.
type hostRequest struct {
	Op    string          `json:"op"` // diff, allow, undo, sources, report
	Base  firewall.Config `json:"base"`
	Edges []Edge          `json:"edges,omitempty"`
}

// hostReply is ServeHost's answer line.
type hostReply struct {
	Diff    []string          `json:"diff,omitempty"`
	Chains  []string          `json:"chains,omitempty"`
	Sources map[string]string `json:"sources,omitempty"` // address → edge name
	Changed bool              `json:"changed,omitempty"` // allow applied a new generation (undo may follow)
	Error   string            `json:"error,omitempty"`
}

// ServeHost is the far side of RemoteFirewall (`fleet firewall host`):
// it reads one request, answers it on out, and after an allow that
// changed the rules waits for "undo" (restore the rules as they were,
// answer again) or the end of in (keep them).
func ServeHost(fw *firewall.Firewall, in io.Reader, out io.Writer) error {
	r := bufio.NewReader(in)
	line, err := r.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return fmt.Errorf("read request: %w", err)
	}
	var req hostRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	t := IPTables{FW: fw, Base: req.Base}
	var rep hostReply
	var undo func() error
	switch req.Op {
	case "diff":
		rep.Diff, err = t.Diff(req.Edges)
	case "report":
		var fr firewall.Report
		fr, err = t.Report(req.Edges)
		rep.Diff, rep.Chains = fr.Diff, fr.Chains
	case "sources":
		var m map[netip.Addr]string
		if m, err = t.Sources(); err == nil {
			rep.Sources = map[string]string{}
			for a, n := range m {
				rep.Sources[a.String()] = n
			}
		}
	case "allow":
		undo, err = t.Allow(req.Edges)
		rep.Changed = undo != nil
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		rep.Error = err.Error()
	}
	if err := json.NewEncoder(out).Encode(rep); err != nil || undo == nil {
		return err
	}
	next, _ := r.ReadString('\n')
	if strings.TrimSpace(next) != "undo" {
		return nil // the end of the session: the change stays
	}
	rep = hostReply{}
	if err := undo(); err != nil {
		rep.Error = err.Error()
	}
	return json.NewEncoder(out).Encode(rep)
}

// session is one run of the remote command: its input, its replies, and
// the end that closes it.
type session struct {
	in      io.WriteCloser
	replies *json.Decoder
	close   func()
}

// open logs in and starts the remote command with req as its first line.
func (r *RemoteFirewall) open(req hostRequest) (*session, hostReply, error) {
	c, err := sshConnect(context.Background(), sshTarget{Addr: r.Addr, User: r.User, HostKey: r.HostKey,
		Auth: r.Auth, Timeout: r.Timeout, Dial: r.Dial})
	if err != nil {
		return nil, hostReply{}, err
	}
	fail := func(err error) (*session, hostReply, error) {
		c.Close()
		return nil, hostReply{}, err
	}
	s, err := c.NewSession()
	if err != nil {
		return fail(fmt.Errorf("ssh session: %w", err))
	}
	in, err := s.StdinPipe()
	if err != nil {
		return fail(err)
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		return fail(err)
	}
	var stderr strings.Builder
	s.Stderr = &stderr
	if err := s.Start(r.Command); err != nil {
		return fail(fmt.Errorf("start %q: %w", r.Command, err))
	}
	req.Base = r.Base
	if err := json.NewEncoder(in).Encode(req); err != nil {
		return fail(fmt.Errorf("send: %w", err))
	}
	ss := &session{in: in, replies: json.NewDecoder(stdout), close: sync.OnceFunc(func() { in.Close(); s.Wait(); c.Close() })}
	var rep hostReply
	if err := ss.replies.Decode(&rep); err != nil {
		in.Close()
		werr := s.Wait()
		c.Close()
		if msg := lastLine(stderr.String()); msg != "" {
			return nil, rep, fmt.Errorf("%s: %s", r.Command, msg)
		}
		return nil, rep, fmt.Errorf("%s: no answer: %w", r.Command, errors.Join(err, werr))
	}
	if rep.Error != "" {
		ss.close()
		return nil, rep, errors.New(rep.Error)
	}
	return ss, rep, nil
}

// call runs one request that ends with its answer.
func (r *RemoteFirewall) call(req hostRequest) (hostReply, error) {
	s, rep, err := r.open(req)
	if err != nil {
		return rep, err
	}
	s.close()
	return rep, nil
}

// Diff is the remote host's rule-level difference to the rules for edges.
func (r *RemoteFirewall) Diff(edges []Edge) ([]string, error) {
	rep, err := r.call(hostRequest{Op: "diff", Edges: edges})
	return rep.Diff, err
}

// Report is the remote host's drift and generation chains.
func (r *RemoteFirewall) Report(edges []Edge) (firewall.Report, error) {
	rep, err := r.call(hostRequest{Op: "report", Edges: edges})
	return firewall.Report{Diff: rep.Diff, Chains: rep.Chains}, err
}

// Sources are the sources the remote host's rules let in.
func (r *RemoteFirewall) Sources() (map[netip.Addr]string, error) {
	rep, err := r.call(hostRequest{Op: "sources"})
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]string{}
	for s, n := range rep.Sources {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q answered for an address", s)
		}
		out[a] = n
	}
	return out, nil
}

// Allowed are Sources' addresses.
func (r *RemoteFirewall) Allowed() (map[netip.Addr]bool, error) {
	src, err := r.Sources()
	if err != nil {
		return nil, err
	}
	m := map[netip.Addr]bool{}
	for a := range src {
		m[a] = true
	}
	return m, nil
}

// Allow applies the rules for edges on the remote host. When they
// changed, the session stays open for the undo (the far side holds the
// rules as they were); it ends, keeping the change, when the undo has
// run, at the next Allow (an undo comes right after its change, before
// the next one: convergence probes, then undoes or goes on), at Close, or
// when the process ends. A long-running fleet watch so holds one session
// per host at most.
func (r *RemoteFirewall) Allow(edges []Edge) (func() error, error) {
	r.Close()
	s, rep, err := r.open(hostRequest{Op: "allow", Edges: edges})
	if err != nil {
		return nil, err
	}
	if !rep.Changed {
		s.close()
		return nil, nil
	}
	r.mu.Lock()
	r.kept = append(r.kept, s)
	r.mu.Unlock()
	return func() error {
		defer r.release(s)
		if _, err := io.WriteString(s.in, "undo\n"); err != nil {
			return fmt.Errorf("undo: %w", err)
		}
		var rep hostReply
		if err := s.replies.Decode(&rep); err != nil {
			return fmt.Errorf("undo: %w", err)
		}
		if rep.Error != "" {
			return errors.New(rep.Error)
		}
		return nil
	}, nil
}

// release ends session s of a change (its undo done, or given up).
func (r *RemoteFirewall) release(s *session) {
	r.mu.Lock()
	r.kept = slices.DeleteFunc(r.kept, func(k *session) bool { return k == s })
	r.mu.Unlock()
	s.close()
}

// Close ends the sessions of the changes whose undo did not come: the
// changes stay. (The end of the process does the same.)
func (r *RemoteFirewall) Close() {
	r.mu.Lock()
	kept := r.kept
	r.kept = nil
	r.mu.Unlock()
	for _, s := range kept {
		s.close()
	}
}

var (
	_ Firewall = (*RemoteFirewall)(nil)
	_ Reporter = (*RemoteFirewall)(nil)
)
