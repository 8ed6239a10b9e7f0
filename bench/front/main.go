// Command front benchmarks the origin's front (bin/origin with the core
// disabled) side by side with a direct connection to the inner service and
// with HAProxy 2.6 doing the same job (`bind … accept-proxy`, mode tcp,
// option splice-auto), in one run, on loopback, against the same
// in-process inner service, and prints a Markdown table per shape with
// ratios against HAProxy and the targets of docs/benchmarks.md. It is run
// by `make bench` (scripts/bench.sh):
//
//	go run ./bench/front -bin bin/origin
//	go run ./bench/front -shapes cheap-vm -cap 50 -rounds 5
//
// It measures in each shape of -shapes (benchkit.Shape): shared, then
// cheap-vm, where each proxy runs alone on -relay-cpu with one thread (the
// origin GOMAXPROCS=1, HAProxy nbthread 1), capped at -cap percent of that
// CPU by a cgroup, and this process (clients and inner service) on
// -load-cpu.
//
// Clients play the edge: they connect from 127.0.0.2 (the front's only
// trusted edge) and open every connection with a PROXY v2 header carrying
// a client address, a unique id and an edge name, as our edge does. The
// front and HAProxy both parse it, dial the inner service, forward, and
// write one log line per connection to a file. The "front, no header"
// row sends no header (the sniff-and-pass-through path).
//
// Three measurements, each bounded in count and time; targets take turns
// within each round (in reverse order every other round) and the median
// of -rounds rounds is reported:
//   - short-connection rate: -clients goroutines each connect, send the
//     header and one byte, read the echo, close, until -conns connections
//     or -conn-time have passed;
//   - single-stream throughput: one connection sends -bytes, or what
//     -stream-time allows, to a sink that answers with the count it
//     received;
//   - idle cost: -idle forwarded connections (each echoes one byte) are
//     held; the proxy's RSS and open file descriptors are read from /proc
//     before and after.
//
// For each, the CPU time the proxy process used (user+system, from
// /proc/PID/stat) is reported per connection and per GiB: on a shared,
// noisy machine it is steadier than the rates.
package main

import (
	"flag"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/bench/internal/benchkit"
	"github.com/edgefleet/edgefleet/internal/proxyheader"
	proxyproto "github.com/pires/go-proxyproto"
	"golang.org/x/sys/unix"
)

var (
	originBin  = flag.String("bin", "bin/origin", "origin binary (make build)")
	haproxyBin = flag.String("haproxy", "haproxy", "haproxy binary")
	targetList = flag.String("targets", "direct,front,front-noheader,haproxy", "comma-separated targets to measure")
	streamSize = flag.Int64("bytes", 1<<30, "bytes sent per single-stream run, at most")
	streamTime = flag.Duration("stream-time", 2*time.Second, "time per single-stream run, at most")
	rounds     = flag.Int("rounds", 3, "rounds of each measurement (median reported)")
	clients    = flag.Int("clients", 32, "concurrent clients in the connection-rate measurement")
	maxConns   = flag.Int("conns", 15000, "short connections per target and round, at most")
	connTime   = flag.Duration("conn-time", 2*time.Second, "time per target and round of the connection-rate measurement, at most")
	idleConns  = flag.Int("idle", 5000, "idle forwarded connections in the idle-cost measurement (0 skips it)")
	keep       = flag.Bool("keep", false, "keep the temporary directory (configs, logs)")
	out        = flag.String("out", "bench/results/front.md", "also write the table here (empty: stdout only)")
	shapeList  = benchkit.ShapeFlags()
)

const edgeIP = "127.0.0.2" // the clients' source address, trusted by the front

func main() { benchkit.Main("front", run) }

func run() error {
	shapes, err := shapeList()
	if err != nil {
		return err
	}
	benchkit.RaiseNofile() // the origin and HAProxy inherit it
	dir, cleanup, err := benchkit.TempDir("front", *keep)
	if err != nil {
		return err
	}
	defer cleanup()
	inner, err := startInner()
	if err != nil {
		return err
	}
	report, err := benchkit.RunShapes(shapes, dir, *targetList, func(s *benchkit.Shape, dir string) map[string]benchkit.Starter {
		var originAddr string
		var originCmd *exec.Cmd
		origin := func() (string, *exec.Cmd, error) { // one process serves "front" and "front-noheader"
			if originCmd == nil {
				addr, cmd, err := startOrigin(s, dir, inner)
				if err != nil {
					return "", cmd, err
				}
				originAddr, originCmd = addr, cmd
			}
			return originAddr, originCmd, nil
		}
		return map[string]benchkit.Starter{
			"direct":         func() (string, *exec.Cmd, error) { return inner, nil, nil },
			"front":          origin,
			"front-noheader": origin,
			"haproxy":        func() (string, *exec.Cmd, error) { return startHAProxy(s, dir, inner) },
		}
	}, func(s *benchkit.Shape, targets []*benchkit.Target) (string, error) {
		res, err := measure(s, targets)
		if err != nil {
			return "", err
		}
		return table(s, targets, res), nil
	})
	if err != nil {
		return err
	}
	benchkit.Publish(*out, report)
	return nil
}

// measure runs the rounds and the idle cost through the targets in shape s.
func measure(s *benchkit.Shape, targets []*benchkit.Target) (map[string]*benchkit.Result, error) {
	res := benchkit.Results(targets)
	for r := range *rounds {
		for _, t := range benchkit.Turn(targets, r) {
			if err := benchkit.Interrupted(); err != nil {
				return nil, err
			}
			x := res[t.Name]
			cr, cpu := x.MeasureRate(t.PID, *clients, *maxConns, *connTime, func() error { return benchkit.EchoOnce(dial(t), msg(t, 'E')) })
			progress("%s round %d %-15s %6.0f conn/s  p50 %v  p99 %v  failed %d  cpu %v  throttled %.0f %%",
				s.Name, r+1, t.Name, cr.Rate, cr.P50, cr.P99, cr.Failed, cpu, 100*benchkit.Last(x.Throttled))
			time.Sleep(500 * time.Millisecond) // let closes settle
		}
		for _, t := range benchkit.Turn(targets, r) {
			tp, cpu, err := res[t.Name].MeasureThroughput(t.PID, dial(t), msg(t), *streamSize, *streamTime)
			if err != nil {
				return nil, fmt.Errorf("%s: throughput: %w", t.Name, err)
			}
			progress("%s round %d %-15s throughput %8.0f MiB/s  cpu %v", s.Name, r+1, t.Name, tp/(1<<20), cpu)
		}
	}

	measured := map[int]bool{}
	for _, t := range targets {
		if t.PID == 0 || measured[t.PID] || *idleConns == 0 {
			continue
		}
		measured[t.PID] = true
		x := res[t.Name]
		x.IdleCost(t.PID, *idleConns, dial(t), func() []byte { return msg(t, 'E') }, nil, nil)
		progress("%s idle %-15s %d conns  %.2f KiB RSS/conn  %.2f fds/conn", s.Name, t.Name, x.IdleOK, x.RSSPerConn, x.FDsPerConn)
	}
	return res, nil
}

func progress(format string, args ...any) { benchkit.Progress("front", format, args...) }

// --- the inner service --------------------------------------------------

// startInner serves benchkit.SinkOrEcho on loopback. It never sees a
// PROXY header: the front and HAProxy strip it.
func startInner() (string, error) {
	return benchkit.Serve(func(c net.Conn) { benchkit.SinkOrEcho(c, c) })
}

// --- the proxies --------------------------------------------------------

// startOrigin runs the origin with the front only; it logs one JSON line
// per connection to a file, as in production. front.per_edge is off: the
// clients are one edge at many times its default rate, and the benchmark
// measures what a forwarded connection costs (HAProxy has no limit either).
// front.max_conns is HAProxy's maxconn (the default, from RLIMIT_NOFILE,
// is below the idle measurement's 5,000 here).
func startOrigin(s *benchkit.Shape, dir, inner string) (string, *exec.Cmd, error) {
	addr, err := benchkit.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	cfg := fmt.Sprintf(`front:
  listen: [%q]
  inner: %q
  trusted_edges: [%s]
  per_edge: {conns: 0, rate: "0"}
  max_conns: 7000
peers_api: ""
metrics: ""
log:
  format: json
core:
  enabled: false
`, addr, inner, edgeIP)
	path, err := benchkit.WriteConfig(dir, "origin.yaml", cfg)
	if err != nil {
		return "", nil, err
	}
	cmd, err := s.Start(dir, "origin", *originBin, "--config", path)
	return addr, cmd, err
}

// startHAProxy runs HAProxy receiving the PROXY header (accept-proxy),
// splicing, and logging one line per connection (option tcplog) to a file,
// like the front.
func startHAProxy(s *benchkit.Shape, dir, inner string) (string, *exec.Cmd, error) {
	return benchkit.StartHAProxy(s, dir, *haproxyBin, true, func(addr string) string {
		return fmt.Sprintf(`listen front
    bind %s accept-proxy
    server inner %s
`, addr, inner)
	})
}

// --- the clients ----------------------------------------------------------

// edgeDialer connects from edgeIP. IP_BIND_ADDRESS_NO_PORT leaves the
// port choice to connect(), which may reuse loopback ports in TIME_WAIT;
// a bind to port 0 could not, and would run out of ports at these rates.
var edgeDialer = net.Dialer{
	Timeout:   5 * time.Second,
	LocalAddr: &net.TCPAddr{IP: net.ParseIP(edgeIP)},
	Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
		})
		if err != nil {
			return err
		}
		return serr
	},
}

var connSeq atomic.Uint64

// header is a PROXY v2 header like our edge's: a client address, a unique
// id and the edge name.
func header() []byte {
	seq := connSeq.Add(1)
	h := proxyproto.HeaderProxyFromAddrs(2,
		&net.TCPAddr{IP: net.IPv4(192, 0, 2, byte(seq)), Port: int(1024 + seq%60000)},
		&net.TCPAddr{IP: net.IPv4(198, 51, 100, 1), Port: 636})
	h.SetTLVs([]proxyproto.TLV{
		{Type: proxyproto.PP2_TYPE_UNIQUE_ID, Value: []byte(strconv.FormatUint(seq, 16))},
		{Type: proxyheader.TLVEdgeName, Value: []byte("bench-edge")},
	})
	b, _ := h.Format()
	return b
}

// dial connects to the target, from edgeIP when it is a proxy.
func dial(t *benchkit.Target) func() (net.Conn, error) {
	return func() (net.Conn, error) {
		if t.PID == 0 {
			return net.DialTimeout("tcp", t.Addr, 5*time.Second)
		}
		return edgeDialer.Dial("tcp", t.Addr)
	}
}

// msg is what a client sends first: a PROXY v2 header if the target
// wants one (the front and HAProxy; not direct, not front-noheader), then
// the given bytes.
func msg(t *benchkit.Target, b ...byte) []byte {
	if t.Name == "front" || t.Name == "haproxy" {
		return append(header(), b...)
	}
	return b
}

// --- the report ---------------------------------------------------------

func table(s *benchkit.Shape, targets []*benchkit.Target, res map[string]*benchkit.Result) string {
	var b strings.Builder
	b.WriteString(benchkit.Heading("Origin front benchmark, " + s.Name))
	b.WriteString(s.Describe())
	fmt.Fprintf(&b, "Short connections (connect, header + 1-byte echo, close; p50/p99 of that): %d clients, ≤ %d conns or %v per target and round; single stream ≤ %d MiB or %v; "+
		"median of %d rounds, the targets in reverse order every other round; idle: %d connections held. "+
		"Proxy CPU is user+system time of the proxy process. Both proxies log one line per connection to a file.\n\n",
		*clients, *maxConns, *connTime, *streamSize>>20, *streamTime, *rounds, *idleConns)
	b.WriteString(benchkit.Table(targets, res, *idleConns))
	b.WriteString(benchkit.ThrottleNote(targets, res))
	if f, h := res["front"], res["haproxy"]; f != nil && h != nil {
		b.WriteString(benchkit.Verdicts("front", s, f.Relay(), h.Relay()))
	}
	b.WriteString("\n")
	return b.String()
}
