// Command front benchmarks the origin's front (bin/origin with the core
// disabled) side by side with a direct connection to the inner service and
// with HAProxy 2.6 doing the same job (`bind … accept-proxy`, mode tcp,
// option splice-auto), in one run, on loopback, against the same
// in-process inner service, and prints a Markdown table with ratios
// against HAProxy and the targets of docs/architecture.md. It is run by `make bench`
// (scripts/bench.sh):
//
//	go run ./bench/front -bin bin/origin
//	go run ./bench/front -rounds 5 -bytes 2147483648
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
//   - single-stream throughput: one connection sends -bytes to a sink
//     that answers with the count it received;
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
	"os"
	"os/exec"
	"slices"
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
	streamSize = flag.Int64("bytes", 1<<30, "bytes sent per single-stream run")
	rounds     = flag.Int("rounds", 3, "rounds of each measurement (median reported)")
	clients    = flag.Int("clients", 32, "concurrent clients in the connection-rate measurement")
	maxConns   = flag.Int("conns", 15000, "short connections per target and round, at most")
	connTime   = flag.Duration("conn-time", 3*time.Second, "time per target and round of the connection-rate measurement, at most")
	idleConns  = flag.Int("idle", 5000, "idle forwarded connections in the idle-cost measurement (0 skips it)")
	keep       = flag.Bool("keep", false, "keep the temporary directory (configs, logs)")
	out        = flag.String("out", "bench/results/front.md", "also write the table here (empty: stdout only)")
)

const edgeIP = "127.0.0.2" // the clients' source address, trusted by the front

// target is one way from the client to the inner service.
type target struct {
	name   string
	addr   string
	header bool // send a PROXY v2 header first
	pid    int  // the proxy process; 0 for direct
}

type result struct {
	rate       []float64 // connections per second
	p50, p99   []time.Duration
	failed     []int
	cpuPerConn []float64 // microseconds of proxy CPU per connection
	tput       []float64 // bytes per second
	cpuPerGiB  []float64 // seconds of proxy CPU per GiB
	idleOK     int
	rssPerConn float64 // KiB
	fdsPerConn float64
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/front:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, cleanup, err := benchkit.TempDir("front", *keep)
	if err != nil {
		return err
	}
	defer cleanup()
	inner, err := startInner()
	if err != nil {
		return err
	}
	var procs []*exec.Cmd
	defer func() { benchkit.Stop(procs) }()

	var targets []*target
	var origin *target
	for _, name := range strings.Split(*targetList, ",") {
		t := &target{name: strings.TrimSpace(name)}
		var cmd *exec.Cmd
		switch t.name {
		case "direct":
			t.addr = inner
		case "front", "front-noheader":
			t.header = t.name == "front"
			if origin == nil {
				origin = &target{}
				origin.addr, cmd, err = startOrigin(dir, inner)
			}
			t.addr, t.pid = origin.addr, origin.pid
		case "haproxy":
			t.header = true
			t.addr, cmd, err = startHAProxy(dir, inner)
		default:
			err = fmt.Errorf("unknown target %q", t.name)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		if cmd != nil {
			procs = append(procs, cmd)
			t.pid = cmd.Process.Pid
			if origin != nil && origin.pid == 0 && strings.HasPrefix(t.name, "front") {
				origin.pid = t.pid
			}
		}
		if err := benchkit.WaitTCP(t.addr, 10*time.Second); err != nil {
			return fmt.Errorf("%s: %w (see %s)", t.name, err, dir)
		}
		targets = append(targets, t)
	}

	res := map[string]*result{}
	for _, t := range targets {
		res[t.name] = &result{}
	}
	for r := range *rounds {
		for _, t := range benchkit.Turn(targets, r) {
			cpu0 := benchkit.CPUTime(t.pid)
			cr := benchkit.ConnRate(*clients, *maxConns, *connTime, func() error { return benchkit.EchoOnce(t.dial, t.msg('E')) })
			cpu := benchkit.CPUTime(t.pid) - cpu0
			x := res[t.name]
			x.rate = append(x.rate, cr.Rate)
			x.p50 = append(x.p50, cr.P50)
			x.p99 = append(x.p99, cr.P99)
			x.failed = append(x.failed, cr.Failed)
			if cr.OK > 0 {
				x.cpuPerConn = append(x.cpuPerConn, cpu.Seconds()*1e6/float64(cr.OK))
			}
			progress("round %d %-15s %6.0f conn/s  p50 %v  p99 %v  failed %d  cpu %v", r+1, t.name, cr.Rate, cr.P50, cr.P99, cr.Failed, cpu)
			time.Sleep(500 * time.Millisecond) // let closes settle
		}
		for _, t := range benchkit.Turn(targets, r) {
			cpu0 := benchkit.CPUTime(t.pid)
			tp, err := benchkit.Throughput(t.dial, t.msg(), *streamSize)
			if err != nil {
				return fmt.Errorf("%s: throughput: %w", t.name, err)
			}
			cpu := benchkit.CPUTime(t.pid) - cpu0
			x := res[t.name]
			x.tput = append(x.tput, tp)
			x.cpuPerGiB = append(x.cpuPerGiB, cpu.Seconds()/(float64(*streamSize)/(1<<30)))
			progress("round %d %-15s throughput %8.0f MiB/s  cpu %v", r+1, t.name, tp/(1<<20), cpu)
		}
	}

	measured := map[int]bool{}
	for _, t := range targets {
		if t.pid == 0 || measured[t.pid] || *idleConns == 0 {
			continue
		}
		measured[t.pid] = true
		x := res[t.name]
		x.idleOK, x.rssPerConn, x.fdsPerConn = idleCost(t, *idleConns)
		progress("idle    %-15s %d conns  %.2f KiB RSS/conn  %.2f fds/conn", t.name, x.idleOK, x.rssPerConn, x.fdsPerConn)
	}

	report := table(targets, res)
	fmt.Print(report)
	benchkit.WriteReport(*out, report)
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench/front: "+format+"\n", args...)
}

// --- the inner service --------------------------------------------------

// startInner serves benchkit.SinkOrEcho on loopback. It never sees a
// PROXY header: the front and HAProxy strip it.
func startInner() (string, error) {
	return benchkit.Serve(func(c net.Conn) { benchkit.SinkOrEcho(c, c) })
}

// --- the proxies --------------------------------------------------------

// startOrigin runs the origin with the front only; it logs one JSON line
// per connection to a file, as in production.
func startOrigin(dir, inner string) (string, *exec.Cmd, error) {
	addr, err := benchkit.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	cfg := fmt.Sprintf(`front:
  listen: [%q]
  inner: %q
  trusted_edges: [%s]
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
	cmd, err := benchkit.Start(dir, "origin", *originBin, "--config", path)
	return addr, cmd, err
}

// startHAProxy runs HAProxy receiving the PROXY header (accept-proxy),
// splicing, and logging one line per connection (option tcplog) to a file,
// like the front.
func startHAProxy(dir, inner string) (string, *exec.Cmd, error) {
	addr, err := benchkit.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	// maxconn 7000 needs 2 fds a connection plus maxpipes (maxconn/4)
	// pipes: about 17,500, inside the 20,000 a process may hold here.
	cfg := fmt.Sprintf(`global
    maxconn 7000
    log stdout format raw daemon
defaults
    mode tcp
    log global
    option tcplog
    option splice-auto
    timeout connect 5s
    timeout client 1h
    timeout server 1h
listen front
    bind %s accept-proxy
    server inner %s
`, addr, inner)
	path, err := benchkit.WriteConfig(dir, "haproxy.cfg", cfg)
	if err != nil {
		return "", nil, err
	}
	cmd, err := benchkit.Start(dir, "haproxy", *haproxyBin, "-db", "-f", path)
	return addr, cmd, err
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
func (t *target) dial() (net.Conn, error) {
	if t.pid == 0 {
		return net.DialTimeout("tcp", t.addr, 5*time.Second)
	}
	return edgeDialer.Dial("tcp", t.addr)
}

// msg is what a client sends first: a PROXY v2 header if the target
// wants one, then the given bytes.
func (t *target) msg(b ...byte) []byte {
	if t.header {
		return append(header(), b...)
	}
	return b
}

// idleCost opens n forwarded connections through t, each echoing one
// byte, holds them, and returns how many were held and the proxy's RSS
// (KiB) and file descriptors per connection.
func idleCost(t *target, n int) (ok int, rssKiB, fds float64) {
	time.Sleep(2 * time.Second)
	rss0, fd0 := benchkit.ProcStats(t.pid)
	conns, ok := benchkit.Hold(n, t.dial, func() []byte { return t.msg('E') })
	time.Sleep(2 * time.Second)
	rss1, fd1 := benchkit.ProcStats(t.pid)
	benchkit.CloseAll(conns)
	benchkit.WaitFDs(t.pid, fd0+16) // let the proxy let go of them before going on
	if ok == 0 {
		return 0, 0, 0
	}
	return ok, float64(rss1-rss0) / float64(ok), float64(fd1-fd0) / float64(ok)
}

// --- the report ---------------------------------------------------------

func table(targets []*target, res map[string]*result) string {
	var b strings.Builder
	b.WriteString(benchkit.Heading("Origin front benchmark"))
	fmt.Fprintf(&b, "Short connections: %d clients, ≤ %d conns or %v per target and round; single stream %d MiB; median of %d rounds; idle: %d connections held. "+
		"Proxy CPU is user+system time of the proxy process. Both proxies log one line per connection to a file.\n\n",
		*clients, *maxConns, *connTime, *streamSize>>20, *rounds, *idleConns)
	b.WriteString("| target | conn/s | × HAProxy | p50 | p99 | failed | CPU µs/conn | throughput MiB/s | × HAProxy | CPU s/GiB | idle RSS KiB/conn | idle fds/conn |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	ref := res["haproxy"]
	ratio := func(x, r []float64) string {
		if r == nil || benchkit.Median(r) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", benchkit.Median(x)/benchkit.Median(r))
	}
	for _, t := range targets {
		x := res[t.name]
		var refRate, refTput []float64
		if ref != nil {
			refRate, refTput = ref.rate, ref.tput
		}
		cpuConn, cpuGiB := "–", "–"
		if t.pid != 0 {
			cpuConn = fmt.Sprintf("%.0f", benchkit.Median(x.cpuPerConn))
			cpuGiB = fmt.Sprintf("%.2f", benchkit.Median(x.cpuPerGiB))
		}
		idleRSS, idleFDs := "–", "–"
		if x.idleOK > 0 {
			idleRSS, idleFDs = fmt.Sprintf("%.1f", x.rssPerConn), fmt.Sprintf("%.2f", x.fdsPerConn)
			if x.idleOK < *idleConns {
				idleRSS += fmt.Sprintf(" (%d held)", x.idleOK)
			}
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %v | %v | %d | %s | %.0f | %s | %s | %s | %s |\n",
			t.name, benchkit.Median(x.rate), ratio(x.rate, refRate), benchkit.Median(x.p50).Round(time.Microsecond), benchkit.Median(x.p99).Round(time.Microsecond),
			slices.Max(append(x.failed, 0)), cpuConn, benchkit.Median(x.tput)/(1<<20), ratio(x.tput, refTput), cpuGiB, idleRSS, idleFDs)
	}
	if f, h := res["front"], res["haproxy"]; f != nil && h != nil {
		relay := func(x *result) benchkit.Relay {
			return benchkit.Relay{Throughput: benchkit.Median(x.tput), Rate: benchkit.Median(x.rate), CPUPerConn: benchkit.Median(x.cpuPerConn),
				P99: benchkit.Median(x.p99), RSSPerConn: x.rssPerConn, FDsPerConn: x.fdsPerConn, IdleOK: x.idleOK > 0}
		}
		b.WriteString(benchkit.Verdicts("front", relay(f), relay(h)))
	}
	b.WriteString("\n")
	return b.String()
}
