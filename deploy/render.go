package deploy

import (
	"bytes"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/edgefleet/edgefleet/internal/listenaddr"
	"github.com/edgefleet/edgefleet/internal/safefile"
	"github.com/edgefleet/edgefleet/relay"
	"golang.org/x/crypto/ssh"
)

// Where an edge's files live on its host. The binary is installed under a
// name carrying its SHA-256 and reached through a symbolic link, so
// switching versions is one rename and the previous version stays on disk;
// the unit checks at every start that the binary's content matches its
// name (deploy/templates/edge.service).
const (
	BinDir     = "/usr/local/lib/edgefleet"
	BinLink    = "/usr/local/bin/edgefleet-edge"
	ConfigPath = "/etc/edgefleet/edge.yaml"
	UnitPath   = "/etc/systemd/system/" + UnitName
	UnitName   = "edgefleet-edge.service"
	// MetricsTokenPath holds the metrics bearer token on an edge host
	// (root only); the unit hands it to the edge as a credential.
	MetricsTokenPath = "/etc/edgefleet/metrics.token"
)

// MaxUserData is the user-data size the common clouds accept (EC2, GCE,
// Hetzner, Scaleway: 16 KiB before base64).
const MaxUserData = 16 << 10

// LimitNOFILE is the unit's file descriptor limit: what an edge holds at
// the default max_conns of 100,000 (relay.Descriptors: two sockets per
// connection and the splice pipes the loops may hold, about 2.5 per
// connection) fits with room.
const LimitNOFILE = 1 << 20

// Deploy is the `deploy:` section of fleet.yaml: what every edge runs and
// how `fleet deploy` reaches it. It holds no secret: identity is a path.
type Deploy struct {
	BinaryURL      string        `mapstructure:"binary_url"`      // where cloud-init fetches the edge binary (https, or http: the SHA-256 is the guarantee)
	BinarySHA256   string        `mapstructure:"binary_sha256"`   // hex SHA-256 of that binary; render needs it, push checks the uploaded file against it
	Binary         string        `mapstructure:"binary"`          // local edge binary that push uploads
	Identity       string        `mapstructure:"identity"`        // SSH private key file for push; empty: the ssh-agent at SSH_AUTH_SOCK
	AuthorizedKeys []string      `mapstructure:"authorized_keys"` // public keys cloud-init authorises for root, for later pushes
	Listen         []string      `mapstructure:"listen"`          // the edge's listen addresses
	Origins        []string      `mapstructure:"origins"`         // what the edges dial; empty: each origin host's address with each of its ports
	Balance        string        `mapstructure:"balance"`         // the edges' balance over their origins
	Metrics        string        `mapstructure:"metrics"`         // the edge's metrics listen address; "" disables
	DrainTimeout   time.Duration `mapstructure:"drain_timeout"`   // the edge's drain_timeout; the unit's stop timeout follows it

	// MetricsTokenFile is a file on fleet's host holding the bearer token
	// of the edges' metrics: rendered onto each edge (its
	// metrics_token_file) and sent by fleet when it reads the drain.
	MetricsTokenFile string `mapstructure:"metrics_token_file"`
	// MetricsAllow lists the hosts (CIDRs) that may reach the edges'
	// metrics port; cloud-init drops every other source at first boot.
	MetricsAllow []string `mapstructure:"metrics_allow"`
	// Limits is the edges' admission (their limits: section), rendered
	// into every edge's file; the edge's defaults unless fleet.yaml says.
	Limits relay.Limits `mapstructure:"limits"`
	// TLSGate is the edges' tls_gate. Its server_names, when not given,
	// are the names agents verify the origin by: name and
	// probe.server_name; mode off turns the gate off.
	TLSGate relay.TLSGate `mapstructure:"tls_gate"`
}

// DefaultDeploy is the edge's own defaults (docs/edge.md) and bin/edge,
// where `make build` puts the binary.
func DefaultDeploy() Deploy {
	return Deploy{Binary: "bin/edge", Listen: []string{":636"}, Metrics: "127.0.0.1:9101", DrainTimeout: 30 * time.Second,
		Balance: relay.BalanceFailover,
		Limits:  relay.DefaultLimits(), TLSGate: relay.DefaultConfig().TLSGate}
}

// Rendering is everything an edge host needs, rendered from the inventory:
// the edge's configuration file, its systemd unit, and the cloud-init
// user-data that writes both and installs the binary on first boot.
// Push installs the same EdgeConfig and Unit bytes.
type Rendering struct {
	Edge       Edge
	EdgeConfig []byte // edgefleet edge YAML, installed at ConfigPath
	Unit       []byte // installed at UnitPath
	UserData   []byte // #cloud-config
	// MetricsToken is installed at MetricsTokenPath (nil: no token).
	MetricsToken []byte
}

//go:embed templates
var templates embed.FS

var tmpl = template.Must(template.New("").Funcs(template.FuncMap{
	"json":   jsonString,
	"indent": indent,
	"shq":    shellQuote,
}).ParseFS(templates, "templates/*"))

// Render renders the files of the edge called name. The binary's URL and
// SHA-256 are required: user-data that fetched an unpinned binary would
// run whatever the URL serves.
func Render(c Config, name string) (*Rendering, error) {
	e, ok := c.Edge(name)
	if !ok {
		return nil, fmt.Errorf("edge %q is not in the inventory", name)
	}
	d := c.Deploy
	if err := d.validate(c, true); err != nil {
		return nil, err
	}
	d.BinarySHA256, _ = ParseSHA256(d.BinarySHA256)
	rc := relay.DefaultConfig()
	rc.Name, rc.Listen, rc.Origins, rc.DrainTimeout = e.Name, d.Listen, d.origins(c), d.DrainTimeout
	if d.Balance != "" {
		rc.Balance = d.Balance
	}
	rc.Limits, rc.TLSGate = d.Limits, d.TLSGate
	if len(rc.TLSGate.ServerNames) == 0 && rc.TLSGate.Mode != relay.GateOff {
		rc.TLSGate.ServerNames = servedNames(c)
	}
	if err := rc.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("deploy.%w", err)
	}
	if err := rc.Validate(); err != nil {
		if strings.HasPrefix(err.Error(), "balance: ") {
			return nil, fmt.Errorf("deploy.%w", err)
		}
		return nil, fmt.Errorf("edge %s configuration: %w", e.Name, err)
	}
	if err := listenaddr.Overlap(rc.Listen); err != nil {
		return nil, fmt.Errorf("deploy.listen: %w", err)
	}
	if relay.Descriptors(rc.MaxConns)+4096 > LimitNOFILE {
		return nil, fmt.Errorf("edge %s: max_conns %d needs more descriptors than LimitNOFILE %d", e.Name, rc.MaxConns, LimitNOFILE)
	}
	r := &Rendering{Edge: e}
	if d.MetricsTokenFile != "" {
		tok, err := safefile.Token(d.MetricsTokenFile)
		if err != nil {
			return nil, fmt.Errorf("deploy.metrics_token_file: %w", err)
		}
		r.MetricsToken = []byte(tok + "\n")
	}
	metrics := metricsListen(e, d)
	allow, err := metricsAllow(d, metrics)
	if err != nil {
		return nil, err
	}
	data := map[string]any{
		"Edge": e, "Deploy": d, "Relay": rc, "LimitNOFILE": LimitNOFILE, "Metrics": metrics,
		"MetricsToken": string(r.MetricsToken), "MetricsTokenPath": MetricsTokenPath, "MetricsAllow": allow,
		"TimeoutStopSec": int64((rc.DrainTimeout + 10*time.Second).Round(time.Second) / time.Second),
		"BinDir":         BinDir, "BinLink": BinLink, "ConfigPath": ConfigPath, "UnitPath": UnitPath, "UnitName": UnitName,
	}
	if r.EdgeConfig, err = execute("edge.yaml", data); err != nil {
		return nil, err
	}
	if r.Unit, err = execute("edge.service", data); err != nil {
		return nil, err
	}
	install, err := execute("install-edge.sh", data)
	if err != nil {
		return nil, err
	}
	data["EdgeConfig"], data["Unit"], data["Install"] = string(r.EdgeConfig), string(r.Unit), string(install)
	if r.UserData, err = execute("user-data.yaml", data); err != nil {
		return nil, err
	}
	if len(r.UserData) >= MaxUserData {
		return nil, fmt.Errorf("edge %s: user-data is %d bytes, over the %d-byte limit", e.Name, len(r.UserData), MaxUserData)
	}
	return r, nil
}

func execute(name string, data any) ([]byte, error) {
	var b bytes.Buffer
	if err := tmpl.ExecuteTemplate(&b, name, data); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// metricsListen is where the rendered edge serves /metrics: the edge's
// own edges[].metrics when it is host:port or http://host:port[/metrics]
// (fleet reads the edge's drain there, so the edge must listen there),
// else deploy.metrics (an https URL or another path is a proxy in front
// of the edge, which listens where deploy.metrics says).
func metricsListen(e Edge, d Deploy) string {
	if e.Metrics == "" {
		return d.Metrics
	}
	if !strings.Contains(e.Metrics, "://") {
		if _, _, err := net.SplitHostPort(e.Metrics); err == nil {
			return e.Metrics
		}
		return d.Metrics
	}
	if u, err := url.Parse(e.Metrics); err == nil && u.Scheme == "http" && u.Port() != "" && (u.Path == "" || u.Path == "/metrics") {
		return u.Host
	}
	return d.Metrics
}

// metricsAllow is the firewall rules of deploy.metrics_allow: for the
// metrics port, an ACCEPT per allowed CIDR and a DROP of the rest, per
// family (iptables, ip6tables).
func metricsAllow(d Deploy, metrics string) ([]string, error) {
	if len(d.MetricsAllow) == 0 || metrics == "" {
		return nil, nil
	}
	_, port, err := net.SplitHostPort(metrics)
	if err != nil {
		return nil, fmt.Errorf("metrics: %q is not host:port", metrics)
	}
	var v4, v6 []string
	for _, a := range d.MetricsAllow {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			ip, ierr := netip.ParseAddr(a)
			if ierr != nil || ip.Zone() != "" {
				return nil, fmt.Errorf("deploy.metrics_allow: %q is not a CIDR or an IP address", a)
			}
			p = netip.PrefixFrom(ip, ip.BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		p = p.Masked()
		rule := "-p tcp --dport " + port + " -s " + p.String() + " -j ACCEPT"
		if p.Addr().Is4() {
			v4 = append(v4, "iptables -I INPUT "+strconv.Itoa(len(v4)+1)+" "+rule)
		} else {
			v6 = append(v6, "ip6tables -I INPUT "+strconv.Itoa(len(v6)+1)+" "+rule)
		}
	}
	out := append(v4, "iptables -I INPUT "+strconv.Itoa(len(v4)+1)+" -p tcp --dport "+port+" -j DROP")
	out = append(out, v6...)
	return append(out, "ip6tables -I INPUT "+strconv.Itoa(len(v6)+1)+" -p tcp --dport "+port+" -j DROP"), nil
}

// origins is what the edges dial: deploy.origins (named by position), or
// each origin host's address with each of its ports — for a pool named
// after the host (par-a, or par-a-8636 for a host with several ports).
func (d Deploy) origins(c Config) []relay.Origin {
	if len(d.Origins) > 0 {
		return relay.OriginList(d.Origins...)
	}
	var out []relay.Origin
	for _, o := range c.Hosts() {
		for _, p := range o.Ports {
			ro := relay.Origin{Address: net.JoinHostPort(o.Address, strconv.Itoa(p))}
			if c.Pool() {
				ro.Name = o.Name
				if len(o.Ports) > 1 {
					ro.Name += "-" + strconv.Itoa(p)
				}
			}
			out = append(out, ro)
		}
	}
	return out
}

// validate checks the deploy section; forRender also requires the pinned
// download that cloud-init needs.
func (d Deploy) validate(c Config, forRender bool) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("deploy.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if forRender || d.BinaryURL != "" {
		u, err := url.Parse(d.BinaryURL)
		switch {
		case d.BinaryURL == "":
			bad("binary_url", "required: cloud-init fetches the edge binary from it")
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
			bad("binary_url", "%q is not an http(s) URL", d.BinaryURL)
		}
	}
	if forRender || d.BinarySHA256 != "" {
		if _, err := ParseSHA256(d.BinarySHA256); err != nil {
			bad("binary_sha256", "%v", err)
		}
	}
	for i, k := range d.AuthorizedKeys {
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err != nil {
			bad(fmt.Sprintf("authorized_keys[%d]", i), "not an SSH public key: %v", err)
		}
	}
	if d.Metrics != "" {
		if _, _, err := net.SplitHostPort(d.Metrics); err != nil {
			bad("metrics", "%q is not host:port", d.Metrics)
		}
	}
	for i, o := range c.Hosts() {
		if len(d.Origins) > 0 || o.Address != "" {
			continue
		}
		if c.Pool() {
			bad("origins", "required when origins[%d].address is empty (the edges must know what to dial)", i)
		} else {
			bad("origins", "required when origin.address is empty (the edges must know what to dial)")
		}
		break
	}
	return errors.Join(errs...)
}

// ParseSHA256 reads a hex SHA-256 (64 digits, either case) and returns it
// lower-cased.
func ParseSHA256(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if b, err := hex.DecodeString(s); err != nil || len(b) != 32 {
		return "", fmt.Errorf("%q is not a SHA-256 (64 hex digits)", s)
	}
	return s, nil
}

// jsonString quotes s for YAML: a JSON string is a YAML double-quoted
// scalar.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// indent prefixes every non-empty line of s with n spaces (a YAML block
// scalar's body).
func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	lines := strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = pad + l
		}
	}
	return strings.Join(lines, "")
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// servedNames are the names agents ask the edges for (their SNI): the
// fleet's name and the probe's server_name when it differs.
func servedNames(c Config) []string {
	names := []string{strings.TrimSuffix(c.Name, ".")}
	if n := strings.TrimSuffix(c.Probe.ServerName, "."); n != "" && !strings.EqualFold(n, names[0]) {
		names = append(names, n)
	}
	return names
}
