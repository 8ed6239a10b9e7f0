// Command edge benchmarks the edge relay side by side with HAProxy 2.6
// (mode tcp, option splice-auto, send-proxy-v2), nginx stream
// (proxy_protocol on) and a direct connection, in one run, on loopback,
// against the same in-process backend, and prints a Markdown table with
// ratios against HAProxy and the targets of docs/architecture.md. The targets take
// turns in each round, in reverse order every other round. It is run by
// `make bench` (scripts/bench.sh):
//
//	go run ./bench/edge -edge bin/edge
//	go run ./bench/edge -rounds 1 -bytes 2147483648 -idle 5000
//
// Three measurements, each bounded in count and time:
//   - single-stream throughput: one connection sends -bytes to a sink that
//     answers with the count it received;
//   - short-connection rate: -clients goroutines each connect, echo one
//     byte, close, until -conns connections or -conn-time have passed;
//   - idle cost: -idle relayed connections are opened (each echoes one
//     byte) and held; the relay's RSS and open file descriptors are read
//     from /proc before and after.
//
// The backend reads the PROXY header when there is one (v1 or v2), so every
// relay does the same work. Throughput and connection rate are the median
// of -rounds rounds, the targets taking turns within each round.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/bench/internal/benchkit"
	"github.com/pires/go-proxyproto"
)

var (
	edgeBin    = flag.String("edge", "bin/edge", "edge binary (make build)")
	haproxyBin = flag.String("haproxy", "haproxy", "haproxy binary")
	nginxBin   = flag.String("nginx", "nginx", "nginx binary")
	nginxMods  = flag.String("nginx-modules", "/usr/lib/nginx/modules", "directory of ngx_stream_module.so (empty: stream is built in)")
	targetList = flag.String("targets", "direct,edge,haproxy,nginx", "comma-separated targets to measure")
	streamSize = flag.Int64("bytes", 2<<30, "bytes sent per single-stream run")
	rounds     = flag.Int("rounds", 3, "rounds of the throughput and connection-rate measurements (median reported)")
	clients    = flag.Int("clients", 32, "concurrent clients in the connection-rate measurement")
	maxConns   = flag.Int("conns", 15000, "short connections per target and round, at most")
	connTime   = flag.Duration("conn-time", 3*time.Second, "time per target and round of the connection-rate measurement, at most")
	idleConns  = flag.Int("idle", 5000, "idle relayed connections in the idle-cost measurement")
	edgeLog    = flag.String("edge-log-level", "info", "the edge's log.level (info writes one line per connection, as in production)")
	keep       = flag.Bool("keep", false, "keep the temporary directory (configs, relay logs)")
	out        = flag.String("out", "bench/results/edge.md", "also write the table here (empty: stdout only)")
)

// target is one way from the client to the backend.
type target struct {
	name    string
	addr    string
	pid     int    // the relay process; 0 for direct
	metrics string // the edge's metrics endpoint, for the Go runtime's view of the idle cost
}

// result is what was measured for one target.
type result struct {
	throughput []float64 // bytes per second, one per round
	rate       []float64 // connections per second, one per round
	p50, p99   []time.Duration
	cpuPerConn []float64 // relay CPU time (user+system) per short connection, µs
	failed     []int     // failed short connections, one per round
	rssPerConn float64
	fdsPerConn float64
	idleOK     int
	idleNote   string
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/edge:", err)
		os.Exit(1)
	}
}

func run() error {
	nofile := benchkit.RaiseNofile()
	dir, cleanup, err := benchkit.TempDir("edge", *keep)
	if err != nil {
		return err
	}
	defer cleanup()

	backend, err := startBackend()
	if err != nil {
		return err
	}
	var procs []*exec.Cmd
	defer func() { benchkit.Stop(procs) }()

	var targets []*target
	for _, name := range strings.Split(*targetList, ",") {
		t := &target{name: strings.TrimSpace(name)}
		var cmd *exec.Cmd
		switch t.name {
		case "direct":
			t.addr = backend
		case "edge":
			t.addr, t.metrics, cmd, err = startEdge(dir, backend)
		case "haproxy":
			t.addr, cmd, err = startHAProxy(dir, backend)
		case "nginx":
			t.addr, cmd, err = startNginx(dir, backend)
		default:
			err = fmt.Errorf("unknown target %q", t.name)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		if cmd != nil {
			procs = append(procs, cmd)
			t.pid = cmd.Process.Pid
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
			tp, err := benchkit.Throughput(t.dial, nil, *streamSize)
			if err != nil {
				return fmt.Errorf("%s: throughput: %w", t.name, err)
			}
			res[t.name].throughput = append(res[t.name].throughput, tp)
			progress("round %d %-8s throughput %8.0f MiB/s", r+1, t.name, tp/(1<<20))
		}
		for _, t := range benchkit.Turn(targets, r) {
			cpu0 := benchkit.CPUTime(t.pid)
			cr := benchkit.ConnRate(*clients, *maxConns, *connTime, func() error { return benchkit.EchoOnce(t.dial, []byte{'E'}) })
			if t.pid != 0 && cr.OK > 0 {
				res[t.name].cpuPerConn = append(res[t.name].cpuPerConn, float64((benchkit.CPUTime(t.pid)-cpu0).Microseconds())/float64(cr.OK))
			}
			x := res[t.name]
			x.rate = append(x.rate, cr.Rate)
			x.p50 = append(x.p50, cr.P50)
			x.p99 = append(x.p99, cr.P99)
			x.failed = append(x.failed, cr.Failed)
			progress("round %d %-8s %6.0f conn/s  p50 %v  p99 %v  failed %d  relay CPU %.0f µs/conn", r+1, t.name, cr.Rate, cr.P50, cr.P99, cr.Failed, lastOr0(x.cpuPerConn))
			time.Sleep(500 * time.Millisecond) // let closes settle
		}
	}
	for _, t := range targets {
		if t.pid == 0 {
			continue
		}
		x := res[t.name]
		x.idleOK, x.rssPerConn, x.fdsPerConn, x.idleNote = idleCost(t, *idleConns)
		progress("idle     %-8s %d conns  %.2f KiB RSS/conn  %.2f fds/conn %s", t.name, x.idleOK, x.rssPerConn, x.fdsPerConn, x.idleNote)
	}

	report := table(targets, res, nofile)
	fmt.Print(report)
	benchkit.WriteReport(*out, report)
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench/edge: "+format+"\n", args...)
}

// --- the backend --------------------------------------------------------

// startBackend serves the backend on loopback: it reads an optional PROXY
// header, then serves benchkit.SinkOrEcho.
func startBackend() (string, error) {
	return benchkit.Serve(func(c net.Conn) {
		br := bufio.NewReaderSize(c, 512)
		if _, err := proxyproto.Read(br); err != nil && !errors.Is(err, proxyproto.ErrNoProxyProtocol) {
			c.Close()
			return
		}
		benchkit.SinkOrEcho(c, br)
	})
}

// --- the relays ---------------------------------------------------------

// startEdge runs our edge with its defaults except the addresses; it logs
// one line per connection to a file, as in production.
func startEdge(dir, backend string) (addr, metrics string, cmd *exec.Cmd, err error) {
	if addr, err = benchkit.FreeAddr(); err != nil {
		return
	}
	if metrics, err = benchkit.FreeAddr(); err != nil {
		return
	}
	cfg := fmt.Sprintf("name: bench-edge\nlisten: ['%s']\norigins: ['%s']\nmetrics: '%s'\nproxy_protocol: v2\nlog: {level: %s}\n",
		addr, backend, metrics, *edgeLog)
	path, err := benchkit.WriteConfig(dir, "edge.yaml", cfg)
	if err != nil {
		return
	}
	cmd, err = benchkit.Start(dir, "edge", *edgeBin, "--config", path)
	return
}

// goStats scrapes the Go runtime's own figures from the edge's metrics
// endpoint: goroutines, stack bytes and heap bytes in use.
func goStats(url string) map[string]float64 {
	m := map[string]float64{}
	if url == "" {
		return m
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + url + "/metrics")
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 {
			switch f[0] {
			case "go_goroutines", "go_memstats_stack_inuse_bytes", "go_memstats_heap_inuse_bytes":
				m[f[0]], _ = strconv.ParseFloat(f[1], 64)
			}
		}
	}
	return m
}

func startHAProxy(dir, backend string) (string, *exec.Cmd, error) {
	addr, err := benchkit.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	// maxconn 7000 needs 2 fds a connection plus maxpipes (maxconn/4) pipes:
	// about 17,500, inside the 20,000 a process may hold here.
	cfg := fmt.Sprintf(`global
    maxconn 7000
defaults
    mode tcp
    option splice-auto
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend fe
    bind %s
    default_backend be
backend be
    server s1 %s send-proxy-v2
`, addr, backend)
	path, err := benchkit.WriteConfig(dir, "haproxy.cfg", cfg)
	if err != nil {
		return "", nil, err
	}
	cmd, err := benchkit.Start(dir, "haproxy", *haproxyBin, "-db", "-f", path)
	return addr, cmd, err
}

func startNginx(dir, backend string) (string, *exec.Cmd, error) {
	addr, err := benchkit.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	load := ""
	if *nginxMods != "" {
		load = "load_module " + filepath.Join(*nginxMods, "ngx_stream_module.so") + ";\n"
	}
	cfg := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 20000;
pid %s/nginx.pid;
error_log stderr warn;
%sevents { worker_connections 16000; }
stream {
    server {
        listen %s;
        proxy_pass %s;
        proxy_protocol on;
        proxy_half_close on;
    }
}
`, dir, load, addr, backend)
	path, err := benchkit.WriteConfig(dir, "nginx.conf", cfg)
	if err != nil {
		return "", nil, err
	}
	cmd, err := benchkit.Start(dir, "nginx", *nginxBin, "-p", dir, "-e", "stderr", "-c", path)
	return addr, cmd, err
}

// --- the measurements ---------------------------------------------------

// dial connects to the target directly, as a client of the relay.
func (t *target) dial() (net.Conn, error) {
	return net.DialTimeout("tcp", t.addr, 5*time.Second)
}

// idleCost opens n relayed connections through t, each echoing one byte,
// and returns how many were held and the relay's RSS (KiB) and file
// descriptors per connection.
func idleCost(t *target, n int) (ok int, rssKiB, fds float64, note string) {
	settle := func() { time.Sleep(2 * time.Second) }
	settle()
	go0 := goStats(t.metrics)
	rss0, fd0 := benchkit.ProcStats(t.pid)
	pipes0 := benchkit.PipeFDs(t.pid)
	conns, ok := benchkit.Hold(n, t.dial, func() []byte { return []byte{'E'} })
	settle()
	rss1, fd1 := benchkit.ProcStats(t.pid)
	pipes1 := benchkit.PipeFDs(t.pid)
	progress("idle     %-8s pipe ends held: %d before, %d with the connections open", t.name, pipes0, pipes1)
	if go1 := goStats(t.metrics); len(go1) == 3 && ok > 0 { // after procStats: the scrape is a connection too
		per := func(k string) float64 { return (go1[k] - go0[k]) / float64(ok) }
		progress("idle     %-8s Go runtime per connection: %.2f goroutines, %.2f KiB stack, %.2f KiB heap in use",
			t.name, per("go_goroutines"), per("go_memstats_stack_inuse_bytes")/1024, per("go_memstats_heap_inuse_bytes")/1024)
	}
	if ok < n {
		note = fmt.Sprintf("(only %d of %d opened)", ok, n)
	}
	benchkit.CloseAll(conns)
	benchkit.WaitFDs(t.pid, fd0+16) // the relay lets go of them before the next target
	if ok == 0 {
		return 0, 0, 0, note
	}
	return ok, float64(rss1-rss0) / float64(ok), float64(fd1-fd0) / float64(ok), note
}

// --- the report ---------------------------------------------------------

func table(targets []*target, res map[string]*result, nofile uint64) string {
	var b strings.Builder
	b.WriteString(benchkit.Heading("Edge benchmark"))
	fmt.Fprintf(&b, "Single stream %d MiB; short connections: %d clients, ≤ %d conns or %v per target and round; "+
		"median of %d rounds; idle: %d connections; RLIMIT_NOFILE %d.\n\n",
		*streamSize>>20, *clients, *maxConns, *connTime, *rounds, *idleConns, nofile)
	b.WriteString("| target | throughput MiB/s | conn/s | p50 | p99 | failed | relay CPU µs/conn | idle RSS/conn KiB | idle fds/conn |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range targets {
		x := res[t.name]
		idle := "— | —"
		if t.pid != 0 {
			idle = fmt.Sprintf("%.2f | %.3f", x.rssPerConn, x.fdsPerConn)
			if x.idleNote != "" {
				idle = fmt.Sprintf("%.2f %s | %.3f", x.rssPerConn, x.idleNote, x.fdsPerConn)
			}
		}
		failed := 0
		for _, f := range x.failed {
			failed += f
		}
		cpu := "—"
		if t.pid != 0 {
			cpu = fmt.Sprintf("%.0f", benchkit.Median(x.cpuPerConn))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %v | %v | %d | %s | %s |\n", t.name,
			benchkit.Median(x.throughput)/(1<<20), benchkit.Median(x.rate),
			benchkit.Median(x.p50).Round(time.Microsecond), benchkit.Median(x.p99).Round(time.Microsecond), failed, cpu, idle)
	}
	e, h := res["edge"], res["haproxy"]
	if e == nil || h == nil {
		return b.String()
	}
	relay := func(x *result) benchkit.Relay {
		return benchkit.Relay{Throughput: benchkit.Median(x.throughput), Rate: benchkit.Median(x.rate), CPUPerConn: benchkit.Median(x.cpuPerConn),
			P99: benchkit.Median(x.p99), RSSPerConn: x.rssPerConn, FDsPerConn: x.fdsPerConn, IdleOK: x.idleOK > 0}
	}
	b.WriteString(benchkit.Verdicts("edge", relay(e), relay(h)))
	return b.String()
}

func lastOr0(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}
