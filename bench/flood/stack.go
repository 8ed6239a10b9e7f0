package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/bench/internal/benchkit"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// The two edges: edge-a is flooded, edge-b is not. Each listens on its
// own loopback address and dials the origin from it (source), so the
// front measures it.
var edgeIPs = map[string]string{"edge-a": "127.0.0.2", "edge-b": "127.0.0.3"}

// base is what both configurations share: the PKI (the core's server
// certificate, the pinned agent certificate), the slapd, the DLP file and
// the pins file.
type base struct {
	dir   string
	pki   *testbed.PKI
	slapd *testbed.Slapd
	dlp   string // path of the DLP file
	pins  string // path of the pins file
}

// newBase makes the PKI and starts the slapd under dir.
func newBase(dir string) (*base, error) {
	b := &base{dir: dir}
	var err error
	if b.pki, err = testbed.NewPKIIn(dir); err != nil {
		return nil, err
	}
	sd := filepath.Join(dir, "ldap1")
	if err := os.Mkdir(sd, 0o700); err != nil {
		return nil, err
	}
	if b.slapd, err = testbed.NewSlapd(sd, testbed.SlapdConfig{}); err != nil {
		return nil, fmt.Errorf("slapd: %w", err)
	}
	h, p, _ := net.SplitHostPort(b.slapd.Addr)
	dlp := fmt.Sprintf(`[
  {"object": "LdapServer", "name": "L1", "host": %q, "port": %s},
  {"object": "ProxyRule", "ruleType": "UserRouting", "name": "ALL", "condition": "(user=*)", "actions": ["forwardto(L1)"], "loadbalance": 0},
  {"object": "LdapProxy", "name": "ldapConfiguration", "rules": ["ALL"]}
]`, h, p)
	if b.dlp, err = benchkit.WriteConfig(dir, "ldap_proxy.json", dlp); err != nil {
		return nil, err
	}
	fp := sha256.Sum256(b.pki.Agent.Certificate[0])
	b.pins, err = benchkit.WriteConfig(dir, "pins", hex.EncodeToString(fp[:])+" agent\n")
	return b, err
}

func (b *base) close() { b.slapd.Close() }

// stack is one configuration's running origin and edges.
type stack struct {
	base   *base
	origin *exec.Cmd
	edges  map[string]string // name → listen address
	procs  []*exec.Cmd

	originMetrics string            // the origin's metrics address
	edgeMetrics   map[string]string // by edge name

}

func (s *stack) stop() { benchkit.Stop(s.procs) }

// originPID is the origin's process (taskset execs it).
func (s *stack) originPID() int { return s.origin.Process.Pid }

// start runs the origin (pinned with taskset) and the edges with the
// defences on or off, and waits for every one to listen.
func (b *base) start(avail defences, on bool) (*stack, error) {
	name := map[bool]string{false: "off", true: "on"}[on]
	st := &stack{base: b, edges: map[string]string{}, edgeMetrics: map[string]string{}}
	front, err := benchkit.FreeAddr()
	if err != nil {
		return nil, err
	}
	ocfg, metrics, err := b.originConfig(front, avail.originYAML(on))
	if err != nil {
		return nil, err
	}
	path, err := benchkit.WriteConfig(b.dir, "origin-"+name+".yaml", ocfg)
	if err != nil {
		return nil, err
	}
	st.origin, err = benchkit.Start(b.dir, "origin-"+name, "taskset", "-c", *originCPU, *originBin, "--config", path)
	if err != nil {
		return nil, fmt.Errorf("origin: %w", err)
	}
	st.procs = append(st.procs, st.origin)
	st.originMetrics = metrics
	if err := benchkit.WaitTCP(front, 10*time.Second); err != nil {
		st.stop()
		return nil, fmt.Errorf("origin: %w (see %s)", err, b.dir)
	}
	for _, e := range []string{"edge-a", "edge-b"} {
		addr, err := b.startEdge(st, e, name, front, avail.edgeYAML(on))
		if err != nil {
			st.stop()
			return nil, err
		}
		st.edges[e] = addr
	}
	return st, nil
}

// startEdge runs edge e of configuration name in front of front.
func (b *base) startEdge(st *stack, e, name, front, defences string) (string, error) {
	ip := edgeIPs[e]
	addr, err := freeAddrOn(ip)
	if err != nil {
		return "", err
	}
	metrics, err := freeAddrOn(ip)
	if err != nil {
		return "", err
	}
	path, err := benchkit.WriteConfig(b.dir, e+"-"+name+".yaml", edgeConfig(e, addr, front, metrics, defences))
	if err != nil {
		return "", err
	}
	bin, args := *edgeBin, []string{"--config", path}
	if e == "edge-a" && *floodedCPU != "" { // the flooded edge: a machine of its own, with the flood's traffic
		bin, args = "taskset", append([]string{"-c", *floodedCPU, *edgeBin}, args...)
	}
	cmd, err := benchkit.Start(b.dir, e+"-"+name, bin, args...)
	if err != nil {
		return "", fmt.Errorf("%s: %w", e, err)
	}
	st.procs = append(st.procs, cmd)
	st.edgeMetrics[e] = metrics
	if err := benchkit.WaitTCP(addr, 10*time.Second); err != nil {
		return "", fmt.Errorf("%s: %w (see %s)", e, err, b.dir)
	}
	return addr, nil
}

// edgeConfig is edge e's configuration with the defences' keys (YAML
// lines at the top level) appended.
func edgeConfig(e, addr, front, metrics, defences string) string {
	return fmt.Sprintf("name: %s\nlisten: ['%s']\norigins: ['%s']\nsource: %s\nmetrics: '%s'\nlog: {format: text}\n%s",
		e, addr, front, edgeIPs[e], metrics, defences)
}

// originConfig is the origin's configuration as the demo writes it (the
// front trusting PROXY headers from 127.0.0.0/8, the core in mtls mode
// with the pinned agent), with sections, the defences' keys, merged in:
// a map of "front" and "core" and "core.tls" to their extra YAML lines.
// metrics is the address of its metrics endpoint.
func (b *base) originConfig(front string, extra map[string]string) (cfg, metrics string, err error) {
	var addrs [3]string
	for i := range addrs {
		if addrs[i], err = benchkit.FreeAddr(); err != nil {
			return "", "", err
		}
	}
	core, peers, metrics := addrs[0], addrs[1], addrs[2]
	cfg = fmt.Sprintf(`front:
  listen: ['%s']
  inner: '%s'
  trusted_edges: ['127.0.0.0/8']
%speers_api: '%s'
metrics: '%s'
log: {format: text}
core:
  listen: '%s'
  config: '%s'
%s  tls:
    mode: mtls
    cert: '%s'
    key: '%s'
    pins: '%s'
%s`, front, core, indent(extra["front"], 2), peers, metrics, core, b.dlp, indent(extra["core"], 2),
		b.pki.Path("server.pem"), b.pki.Path("server.key"), b.pins, indent(extra["core.tls"], 4))
	return cfg, metrics, nil
}

// indent prefixes every line of s with n spaces.
func indent(s string, n int) string {
	if s == "" {
		return ""
	}
	pad := strings.Repeat(" ", n)
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		b.WriteString(pad + l + "\n")
	}
	return b.String()
}

// freeAddrOn is a port nothing listens on right now at ip.
func freeAddrOn(ip string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
