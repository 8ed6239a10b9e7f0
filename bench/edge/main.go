// Command edge benchmarks the edge relay (failing over along one backend,
// and balancing round robin over two: edge-rr2) side by side with HAProxy 2.6
// (mode tcp, option splice-auto, send-proxy-v2), nginx stream
// (proxy_protocol on) and a direct connection, in one run, on loopback,
// against the same in-process backend, and prints a Markdown table per
// shape with ratios against HAProxy and the targets of
// docs/benchmarks.md. The targets take turns in each round, in reverse
// order every other round. It is run by `make bench` (scripts/bench.sh):
//
//	go run ./bench/edge -edge bin/edge
//	go run ./bench/edge -shapes cheap-vm -cap 50 -rounds 3 -idle 5000
//
// It measures in each shape of -shapes (benchkit.Shape): shared, where
// relays, clients and backend float over every CPU, then cheap-vm, where
// each relay runs alone on -relay-cpu with one thread (our edge
// GOMAXPROCS=1, so one loop; HAProxy nbthread 1; nginx one worker),
// capped at -cap percent of that CPU by a cgroup, and this process (the
// clients and the backend) on -load-cpu.
//
// Three measurements, each bounded in count and time:
//   - single-stream throughput: one connection sends -bytes, or what
//     -stream-time allows, to a sink that answers with the count it
//     received;
//   - short-connection rate: -clients goroutines each connect, echo one
//     byte, close, until -conns connections or -conn-time have passed;
//     p50/p99 of that, and the relay's CPU time per connection;
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
	targetList = flag.String("targets", "direct,edge,edge-rr2,haproxy,nginx", "comma-separated targets to measure (edge-rr2: the edge balancing round robin over two backends)")
	streamSize = flag.Int64("bytes", 2<<30, "bytes sent per single-stream run, at most")
	streamTime = flag.Duration("stream-time", 2*time.Second, "time per single-stream run, at most")
	rounds     = flag.Int("rounds", 3, "rounds of the throughput and connection-rate measurements (median reported)")
	clients    = flag.Int("clients", 32, "concurrent clients in the connection-rate measurement")
	maxConns   = flag.Int("conns", 15000, "short connections per target and round, at most")
	connTime   = flag.Duration("conn-time", 2*time.Second, "time per target and round of the connection-rate measurement, at most")
	idleConns  = flag.Int("idle", 5000, "idle relayed connections in the idle-cost measurement")
	edgeLog    = flag.String("edge-log-level", "info", "the edge's log.level (info writes one line per connection, as in production)")
	peersLog   = flag.Bool("peers-log", true, "HAProxy (option tcplog) and nginx (access_log) log one line per connection to a file, as the edge does; false: they log nothing")
	keep       = flag.Bool("keep", false, "keep the temporary directory (configs, relay logs)")
	out        = flag.String("out", "bench/results/edge.md", "also write the table here (empty: stdout only)")
	shapeList  = benchkit.ShapeFlags()
)

// edgeMetrics is the edge's metrics endpoint, for the Go runtime's view
// of the idle cost ("" until the edge is started).
var edgeMetrics string

func main() { benchkit.Main("edge", run) }

func run() error {
	shapes, err := shapeList()
	if err != nil {
		return err
	}
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
	backend2, err := startBackend()
	if err != nil {
		return err
	}
	report, err := benchkit.RunShapes(shapes, dir, *targetList, func(s *benchkit.Shape, dir string) map[string]benchkit.Starter {
		return map[string]benchkit.Starter{
			"direct": func() (string, *exec.Cmd, error) { return backend, nil, nil },
			"edge": func() (addr string, cmd *exec.Cmd, err error) {
				addr, edgeMetrics, cmd, err = startEdge(s, dir, "failover", backend)
				return addr, cmd, err
			},
			"edge-rr2": func() (addr string, cmd *exec.Cmd, err error) {
				addr, _, cmd, err = startEdge(s, dir, "round-robin", backend, backend2)
				return addr, cmd, err
			},
			"haproxy": func() (string, *exec.Cmd, error) { return startHAProxy(s, dir, backend) },
			"nginx":   func() (string, *exec.Cmd, error) { return startNginx(s, dir, backend) },
		}
	}, func(s *benchkit.Shape, targets []*benchkit.Target) (string, error) {
		res, err := measure(s, targets)
		if err != nil {
			return "", err
		}
		return table(s, targets, res, nofile), nil
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
			tp, _, err := res[t.Name].MeasureThroughput(t.PID, dial(t), nil, *streamSize, *streamTime)
			if err != nil {
				return nil, fmt.Errorf("%s: throughput: %w", t.Name, err)
			}
			progress("%s round %d %-8s throughput %8.0f MiB/s", s.Name, r+1, t.Name, tp/(1<<20))
		}
		for _, t := range benchkit.Turn(targets, r) {
			x := res[t.Name]
			cr, _ := x.MeasureRate(t.PID, *clients, *maxConns, *connTime, func() error { return benchkit.EchoOnce(dial(t), []byte{'E'}) })
			progress("%s round %d %-8s %6.0f conn/s  p50 %v  p99 %v  failed %d  relay CPU %.0f µs/conn  throttled %.0f %%",
				s.Name, r+1, t.Name, cr.Rate, cr.P50, cr.P99, cr.Failed, benchkit.Last(x.CPUPerConn), 100*benchkit.Last(x.Throttled))
			time.Sleep(500 * time.Millisecond) // let closes settle
		}
	}
	for _, t := range targets {
		if t.PID == 0 || *idleConns == 0 {
			continue
		}
		x := res[t.Name]
		idleCost(t, x, *idleConns)
		progress("%s idle %-8s %d conns  %.2f KiB RSS/conn  %.2f fds/conn %s", s.Name, t.Name, x.IdleOK, x.RSSPerConn, x.FDsPerConn, idleNote(x))
	}
	return res, nil
}

func progress(format string, args ...any) { benchkit.Progress("edge", format, args...) }

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

// startEdge runs our edge with its defaults except the addresses, balance
// over backends and the limits (off: the load comes from one address at
// rates no agent has, and HAProxy and nginx run without any); it logs one
// line per connection to a file, as in production (and as HAProxy and
// nginx do with -peers-log).
func startEdge(s *benchkit.Shape, dir, balance string, backends ...string) (addr, metrics string, cmd *exec.Cmd, err error) {
	if addr, err = benchkit.FreeAddr(); err != nil {
		return
	}
	if metrics, err = benchkit.FreeAddr(); err != nil {
		return
	}
	cfg := fmt.Sprintf("name: bench-edge\nlisten: ['%s']\norigins: ['%s']\nbalance: %s\nmetrics: '%s'\nproxy_protocol: v2\nlog: {level: %s}\n"+
		"limits: {per_source: {conns: 0, rate: '0'}, per_prefix: {conns: 0, rate: '0'}, accept_rate: '0'}\n",
		addr, strings.Join(backends, "', '"), balance, metrics, *edgeLog)
	path, err := benchkit.WriteConfig(dir, "edge-"+balance+".yaml", cfg)
	if err != nil {
		return
	}
	name := "edge" // the target's name: its log file and its cgroup
	if balance != "failover" {
		name = "edge-rr2"
	}
	cmd, err = s.Start(dir, name, *edgeBin, "--config", path)
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

func startHAProxy(s *benchkit.Shape, dir, backend string) (string, *exec.Cmd, error) {
	return benchkit.StartHAProxy(s, dir, *haproxyBin, *peersLog, func(addr string) string {
		return fmt.Sprintf(`frontend fe
    bind %s
    default_backend be
backend be
    server s1 %s send-proxy-v2
`, addr, backend)
	})
}

func startNginx(s *benchkit.Shape, dir, backend string) (string, *exec.Cmd, error) {
	addr, err := benchkit.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	// The access log is buffered as the edge's log is (32 KiB, flushed
	// every 100 ms).
	access := "access_log off;"
	if *peersLog {
		access = fmt.Sprintf("log_format conn '$remote_addr:$remote_port $upstream_addr $status $bytes_sent $bytes_received $session_time';\n    access_log %s conn buffer=32k flush=100ms;",
			filepath.Join(dir, "nginx-access.log"))
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
    %s
    server {
        listen %s;
        proxy_pass %s;
        proxy_protocol on;
        proxy_half_close on;
    }
}
`, dir, load, access, addr, backend)
	path, err := benchkit.WriteConfig(dir, "nginx.conf", cfg)
	if err != nil {
		return "", nil, err
	}
	cmd, err := s.Start(dir, "nginx", *nginxBin, "-p", dir, "-e", "stderr", "-c", path)
	return addr, cmd, err
}

// --- the measurements ---------------------------------------------------

// dial connects to the target directly, as a client of the relay.
func dial(t *benchkit.Target) func() (net.Conn, error) {
	return func() (net.Conn, error) { return net.DialTimeout("tcp", t.Addr, 5*time.Second) }
}

// idleCost measures the idle cost of n relayed connections through t,
// each echoing one byte, into x; for the edge it also reports the pipe
// ends and the Go runtime's figures per connection.
func idleCost(t *benchkit.Target, x *benchkit.Result, n int) {
	metrics := ""
	if t.Name == "edge" {
		metrics = edgeMetrics
	}
	var go0 map[string]float64
	var pipes0 int
	before := func() {
		go0 = goStats(metrics)
		pipes0 = benchkit.PipeFDs(t.PID)
	}
	held := func(ok int) {
		progress("idle     %-8s pipe ends held: %d before, %d with the connections open", t.Name, pipes0, benchkit.PipeFDs(t.PID))
		if go1 := goStats(metrics); len(go1) == 3 && ok > 0 { // after the /proc reading: the scrape is a connection too
			per := func(k string) float64 { return (go1[k] - go0[k]) / float64(ok) }
			progress("idle     %-8s Go runtime per connection: %.2f goroutines, %.2f KiB stack, %.2f KiB heap in use",
				t.Name, per("go_goroutines"), per("go_memstats_stack_inuse_bytes")/1024, per("go_memstats_heap_inuse_bytes")/1024)
		}
	}
	x.IdleCost(t.PID, n, dial(t), func() []byte { return []byte{'E'} }, before, held)
}

// idleNote says when fewer idle connections were held than asked for.
func idleNote(x *benchkit.Result) string {
	if x.IdleOK < *idleConns {
		return fmt.Sprintf("(only %d of %d opened)", x.IdleOK, *idleConns)
	}
	return ""
}

// --- the report ---------------------------------------------------------

// logNote says which relays log a line per connection.
func logNote() string {
	edge := "The edge logs one line per connection to a file (log.level info)"
	if *edgeLog != "info" && *edgeLog != "debug" {
		edge = "The edge logs no line per connection (log.level " + *edgeLog + ")"
	}
	if *peersLog {
		return edge + "; HAProxy (option tcplog) and nginx (access_log) one line per connection to a file too."
	}
	return edge + "; HAProxy and nginx log nothing."
}

func table(s *benchkit.Shape, targets []*benchkit.Target, res map[string]*benchkit.Result, nofile uint64) string {
	var b strings.Builder
	b.WriteString(benchkit.Heading("Edge benchmark, " + s.Name))
	b.WriteString(s.Describe())
	fmt.Fprintf(&b, "Single stream ≤ %d MiB or %v; short connections (connect, 1-byte echo, close; p50/p99 of that): %d clients, ≤ %d conns or %v per target and round; "+
		"median of %d rounds, the targets in reverse order every other round; idle: %d connections; relay CPU is user+system time of the relay process; RLIMIT_NOFILE %d. %s\n\n",
		*streamSize>>20, *streamTime, *clients, *maxConns, *connTime, *rounds, *idleConns, nofile, logNote())
	b.WriteString(benchkit.Table(targets, res, *idleConns))
	b.WriteString(benchkit.ThrottleNote(targets, res))
	e, h, rr := res["edge"], res["haproxy"], res["edge-rr2"]
	if e != nil && h != nil {
		b.WriteString(benchkit.Verdicts("edge", s, e.Relay(), h.Relay()))
	}
	if e != nil && rr != nil {
		b.WriteString(benchkit.BalanceNote(e.Relay(), rr.Relay()))
	}
	return b.String()
}
