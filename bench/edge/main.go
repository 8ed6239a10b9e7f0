// Command edge benchmarks the edge relay side by side with HAProxy 2.6
// (mode tcp, option splice-auto, send-proxy-v2), nginx stream
// (proxy_protocol on) and a direct connection, in one run, on loopback,
// against the same in-process backend, and prints a Markdown table with
// ratios against HAProxy. It is run by `make bench` (scripts/bench.sh):
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
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

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
	throughput     []float64 // bytes per second, one per round
	rate           []float64 // connections per second, one per round
	p50, p99       []time.Duration
	cpuPerConn     []float64 // relay CPU time (user+system) per short connection, µs
	failed         []int     // failed short connections, one per round
	rssPerConn     float64
	fdsPerConn     float64
	idleOK         int
	idleNote, errs string
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/edge:", err)
		os.Exit(1)
	}
}

func run() error {
	nofile := raiseNofile()
	dir, err := os.MkdirTemp("", "bench-edge-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintln(os.Stderr, "bench/edge: files in", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	backend, err := startBackend()
	if err != nil {
		return err
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				p.Process.Kill()
				<-done
			}
		}
	}()

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
		if err := waitTCP(t.addr, 10*time.Second); err != nil {
			return fmt.Errorf("%s: %w (see %s)", t.name, err, dir)
		}
		targets = append(targets, t)
	}

	res := map[string]*result{}
	for _, t := range targets {
		res[t.name] = &result{}
	}
	for r := range *rounds {
		for _, t := range targets {
			tp, err := throughput(t.addr, *streamSize)
			if err != nil {
				return fmt.Errorf("%s: throughput: %w", t.name, err)
			}
			res[t.name].throughput = append(res[t.name].throughput, tp)
			progress("round %d %-8s throughput %8.0f MiB/s", r+1, t.name, tp/(1<<20))
		}
		for _, t := range targets {
			cpu0 := cpuTime(t.pid)
			cr := connRate(t.addr, *clients, *maxConns, *connTime)
			if t.pid != 0 && cr.ok > 0 {
				res[t.name].cpuPerConn = append(res[t.name].cpuPerConn, float64((cpuTime(t.pid)-cpu0).Microseconds())/float64(cr.ok))
			}
			x := res[t.name]
			x.rate = append(x.rate, cr.rate)
			x.p50 = append(x.p50, cr.p50)
			x.p99 = append(x.p99, cr.p99)
			x.failed = append(x.failed, cr.failed)
			progress("round %d %-8s %6.0f conn/s  p50 %v  p99 %v  failed %d  relay CPU %.0f µs/conn", r+1, t.name, cr.rate, cr.p50, cr.p99, cr.failed, lastOr0(x.cpuPerConn))
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
	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err == nil {
			os.WriteFile(*out, []byte(report), 0o644)
		}
	}
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench/edge: "+format+"\n", args...)
}

// raiseNofile lifts the soft RLIMIT_NOFILE to the hard limit (at most
// 20,000 on these machines); the relays started later inherit it.
func raiseNofile() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	rl.Cur = rl.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	return rl.Cur
}

// --- the backend --------------------------------------------------------

// startBackend serves the backend on loopback: it reads an optional PROXY
// header, then the first byte decides: 'S' is a sink that answers the
// byte count at EOF, anything else is echoed and the connection held
// until the client closes.
func startBackend() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond) // EMFILE and the like
				continue
			}
			go backendConn(c)
		}
	}()
	return ln.Addr().String(), nil
}

var sinkBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

func backendConn(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 512)
	if _, err := proxyproto.Read(br); err != nil && !errors.Is(err, proxyproto.ErrNoProxyProtocol) {
		return
	}
	first, err := br.ReadByte()
	if err != nil {
		return
	}
	if first != 'S' {
		c.Write([]byte{first})
		io.Copy(io.Discard, br)
		return
	}
	bp := sinkBufs.Get().(*[]byte)
	defer sinkBufs.Put(bp)
	var n int64
	for {
		m, err := br.Read(*bp)
		n += int64(m)
		if err != nil {
			break
		}
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	c.Write(b[:])
}

// --- the relays ---------------------------------------------------------

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func start(dir, name, bin string, args ...string) (*exec.Cmd, error) {
	path, err := lookPath(bin)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, cmd.Start()
}

// lookPath also looks in the sbin directories a non-root PATH may lack.
func lookPath(b string) (string, error) {
	if p, err := exec.LookPath(b); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		if p, err := exec.LookPath(filepath.Join(d, b)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (make build; make deps)", b)
}

// startEdge runs our edge with its defaults except the addresses; it logs
// one line per connection to a file, as in production.
func startEdge(dir, backend string) (addr, metrics string, cmd *exec.Cmd, err error) {
	if addr, err = freeAddr(); err != nil {
		return
	}
	if metrics, err = freeAddr(); err != nil {
		return
	}
	cfg := fmt.Sprintf("name: bench-edge\nlisten: ['%s']\norigins: ['%s']\nmetrics: '%s'\nproxy_protocol: v2\nlog: {level: %s}\n",
		addr, backend, metrics, *edgeLog)
	path := filepath.Join(dir, "edge.yaml")
	if err = os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return
	}
	cmd, err = start(dir, "edge", *edgeBin, "--config", path)
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
	addr, err := freeAddr()
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
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return "", nil, err
	}
	cmd, err := start(dir, "haproxy", *haproxyBin, "-db", "-f", path)
	return addr, cmd, err
}

func startNginx(dir, backend string) (string, *exec.Cmd, error) {
	addr, err := freeAddr()
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
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return "", nil, err
	}
	cmd, err := start(dir, "nginx", *nginxBin, "-p", dir, "-e", "stderr", "-c", path)
	return addr, cmd, err
}

func waitTCP(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not accepting after %v: %w", addr, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// --- the measurements ---------------------------------------------------

// throughput sends n bytes through addr to the sink and returns bytes per
// second, from the connect to the sink's answer.
func throughput(addr string, n int64) (float64, error) {
	buf := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{7})
	rng.Read(buf)
	t0 := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	if _, err := c.Write([]byte{'S'}); err != nil {
		return 0, err
	}
	for sent := int64(1); sent < n; {
		m, err := c.Write(buf[:min(int64(len(buf)), n-sent)])
		sent += int64(m)
		if err != nil {
			return 0, err
		}
	}
	c.(*net.TCPConn).CloseWrite()
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, fmt.Errorf("sink answer: %w", err)
	}
	if got := int64(binary.BigEndian.Uint64(b[:])); got != n-1 {
		return 0, fmt.Errorf("sink received %d bytes, want %d", got, n-1)
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

type rateResult struct {
	ok       int // connections that echoed
	rate     float64
	p50, p99 time.Duration
	failed   int
}

// connRate runs clients loops of connect, 1-byte echo, close until max
// connections or d have passed.
func connRate(addr string, clients, max int, d time.Duration) rateResult {
	var issued atomic.Int64
	var failed atomic.Int64
	deadline := time.Now().Add(d)
	lats := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range clients {
		wg.Go(func() {
			b := []byte{'E'}
			for issued.Add(1) <= int64(max) && time.Now().Before(deadline) {
				s := time.Now()
				if err := echoOnce(addr, b); err != nil {
					failed.Add(1)
					continue
				}
				lats[i] = append(lats[i], time.Since(s))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	all := slices.Concat(lats...)
	slices.Sort(all)
	r := rateResult{failed: int(failed.Load()), ok: len(all)}
	if len(all) > 0 {
		r.rate = float64(len(all)) / elapsed.Seconds()
		r.p50 = all[len(all)/2]
		r.p99 = all[len(all)*99/100]
	}
	return r
}

func echoOnce(addr string, b []byte) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(b); err != nil {
		return err
	}
	var r [1]byte
	_, err = io.ReadFull(c, r[:])
	return err
}

// idleCost opens n relayed connections through t, each echoing one byte,
// and returns how many were held and the relay's RSS (KiB) and file
// descriptors per connection.
func idleCost(t *target, n int) (ok int, rssKiB, fds float64, note string) {
	settle := func() { time.Sleep(2 * time.Second) }
	settle()
	go0 := goStats(t.metrics)
	rss0, fd0 := procStats(t.pid)
	pipes0 := pipeFDs(t.pid)
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	var opened atomic.Int64
	var next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				c, err := net.DialTimeout("tcp", t.addr, 5*time.Second)
				if err != nil {
					continue
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				var b [1]byte
				if _, err := c.Write([]byte{'E'}); err != nil {
					c.Close()
					continue
				}
				if _, err := io.ReadFull(c, b[:]); err != nil {
					c.Close()
					continue
				}
				c.SetDeadline(time.Time{})
				conns[i] = c
				opened.Add(1)
			}
		})
	}
	wg.Wait()
	settle()
	rss1, fd1 := procStats(t.pid)
	pipes1 := pipeFDs(t.pid)
	ok = int(opened.Load())
	progress("idle     %-8s pipe ends held: %d before, %d with the connections open", t.name, pipes0, pipes1)
	if go1 := goStats(t.metrics); len(go1) == 3 && ok > 0 { // after procStats: the scrape is a connection too
		per := func(k string) float64 { return (go1[k] - go0[k]) / float64(ok) }
		progress("idle     %-8s Go runtime per connection: %.2f goroutines, %.2f KiB stack, %.2f KiB heap in use",
			t.name, per("go_goroutines"), per("go_memstats_stack_inuse_bytes")/1024, per("go_memstats_heap_inuse_bytes")/1024)
	}
	if ok < n {
		note = fmt.Sprintf("(only %d of %d opened)", ok, n)
	}
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	// Wait for the relay to let go of them before the next target.
	for range 100 {
		if _, fd := procStats(t.pid); fd <= fd0+16 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ok == 0 {
		return 0, 0, 0, note
	}
	return ok, float64(rss1-rss0) / float64(ok), float64(fd1-fd0) / float64(ok), note
}

// pipeFDs counts the pipe ends pid holds (splice buffers).
func pipeFDs(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// cpuTime is the user+system CPU time pid has used (all its threads).
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces): utime and
	// stime are the 12th and 13th, in clock ticks (100 per second).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// procStats returns VmRSS in KiB and the number of open file descriptors.
func procStats(pid int) (rssKiB int64, fds int64) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rssKiB, _ = strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return rssKiB, int64(len(ents))
}

// --- the report ---------------------------------------------------------

func median[T int | float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func table(targets []*target, res map[string]*result, nofile uint64) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "\n### Edge benchmark (%s, %s, %d CPUs, load %s)\n\n", time.Now().UTC().Format(time.RFC3339), host, runtime.NumCPU(), loadavg())
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
			cpu = fmt.Sprintf("%.0f", median(x.cpuPerConn))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %v | %v | %d | %s | %s |\n", t.name,
			median(x.throughput)/(1<<20), median(x.rate),
			median(x.p50).Round(time.Microsecond), median(x.p99).Round(time.Microsecond), failed, cpu, idle)
	}
	e, h := res["edge"], res["haproxy"]
	if e == nil || h == nil {
		return b.String()
	}
	tp := median(e.throughput) / median(h.throughput)
	cr := median(e.rate) / median(h.rate)
	b.WriteString("\n| edge vs HAProxy | ratio | target | met |\n|---|---:|---|---|\n")
	fmt.Fprintf(&b, "| throughput | %.2f× | ≥ 1.3× | %s |\n", tp, yes(tp >= 1.3))
	fmt.Fprintf(&b, "| connection rate | %.2f× | ≥ 1.0× (stretch 1.2×) | %s |\n", cr, yes(cr >= 1.0))
	fmt.Fprintf(&b, "| relay CPU per short connection | %.2f× HAProxy's (%.0f vs %.0f µs) | (lower is better; not a target) | |\n",
		median(e.cpuPerConn)/median(h.cpuPerConn), median(e.cpuPerConn), median(h.cpuPerConn))
	fmt.Fprintf(&b, "| idle RSS per connection | %.2f KiB (HAProxy %.2f) | ≤ 8 KiB | %s |\n", e.rssPerConn, h.rssPerConn, yes(e.rssPerConn <= 8 && e.idleOK > 0))
	fmt.Fprintf(&b, "| idle fds per connection | %.3f (HAProxy %.3f) | ≤ 2 | %s |\n", e.fdsPerConn, h.fdsPerConn, yes(e.fdsPerConn <= 2 && e.idleOK > 0))
	return b.String()
}

func lastOr0(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
