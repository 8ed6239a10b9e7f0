// Command front benchmarks the origin's front (bin/origin with the core
// disabled) side by side with a direct connection to the inner service and
// with HAProxy 2.6 doing the same job (`bind … accept-proxy`, mode tcp,
// option splice-auto), in one run, on loopback, against the same
// in-process inner service, and prints a Markdown table with ratios
// against HAProxy. It is run by `make bench` (scripts/bench.sh):
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
// within each round and the median of -rounds rounds is reported:
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
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
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
	dir, err := os.MkdirTemp("", "bench-front-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintln(os.Stderr, "bench/front: files in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	inner, err := startInner()
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
			cpu0 := cpuTime(t.pid)
			cr := connRate(t, *clients, *maxConns, *connTime)
			cpu := cpuTime(t.pid) - cpu0
			x := res[t.name]
			x.rate = append(x.rate, cr.rate)
			x.p50 = append(x.p50, cr.p50)
			x.p99 = append(x.p99, cr.p99)
			x.failed = append(x.failed, cr.failed)
			if cr.done > 0 {
				x.cpuPerConn = append(x.cpuPerConn, cpu.Seconds()*1e6/float64(cr.done))
			}
			progress("round %d %-15s %6.0f conn/s  p50 %v  p99 %v  failed %d  cpu %v", r+1, t.name, cr.rate, cr.p50, cr.p99, cr.failed, cpu)
			time.Sleep(500 * time.Millisecond) // let closes settle
		}
		for _, t := range targets {
			cpu0 := cpuTime(t.pid)
			tp, err := throughput(t, *streamSize)
			if err != nil {
				return fmt.Errorf("%s: throughput: %w", t.name, err)
			}
			cpu := cpuTime(t.pid) - cpu0
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
	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err == nil {
			os.WriteFile(*out, []byte(report), 0o644)
		}
	}
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench/front: "+format+"\n", args...)
}

// --- the inner service --------------------------------------------------

// startInner serves the inner service on loopback. The first byte decides:
// 'S' is a sink that answers the byte count at EOF; anything else is
// echoed and the connection held until the client closes. It never sees a
// PROXY header: the front and HAProxy strip it.
func startInner() (string, error) {
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
			go innerConn(c)
		}
	}()
	return ln.Addr().String(), nil
}

var sinkBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

func innerConn(c net.Conn) {
	defer c.Close()
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		return
	}
	if first[0] != 'S' {
		c.Write(first[:])
		io.Copy(io.Discard, c)
		return
	}
	bp := sinkBufs.Get().(*[]byte)
	defer sinkBufs.Put(bp)
	var n int64
	for {
		m, err := c.Read(*bp)
		n += int64(m)
		if err != nil {
			break
		}
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	c.Write(b[:])
}

// --- the proxies --------------------------------------------------------

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

// startOrigin runs the origin with the front only; it logs one JSON line
// per connection to a file, as in production.
func startOrigin(dir, inner string) (string, *exec.Cmd, error) {
	addr, err := freeAddr()
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
	path := filepath.Join(dir, "origin.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return "", nil, err
	}
	cmd, err := start(dir, "origin", *originBin, "--config", path)
	return addr, cmd, err
}

// startHAProxy runs HAProxy receiving the PROXY header (accept-proxy),
// splicing, and logging one line per connection (option tcplog) to a file,
// like the front.
func startHAProxy(dir, inner string) (string, *exec.Cmd, error) {
	addr, err := freeAddr()
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
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return "", nil, err
	}
	cmd, err := start(dir, "haproxy", *haproxyBin, "-db", "-f", path)
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
		{Type: 0xE0, Value: []byte("bench-edge")},
	})
	b, _ := h.Format()
	return b
}

func dial(t *target) (net.Conn, error) {
	if t.pid == 0 {
		return net.DialTimeout("tcp", t.addr, 5*time.Second)
	}
	return edgeDialer.Dial("tcp", t.addr)
}

// throughput sends n bytes through t to the sink and returns bytes per
// second, from the connect to the sink's answer.
func throughput(t *target, n int64) (float64, error) {
	buf := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{7})
	rng.Read(buf)
	t0 := time.Now()
	c, err := dial(t)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	first := []byte{'S'}
	if t.header {
		first = append(header(), 'S')
	}
	if _, err := c.Write(first); err != nil {
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
	rate     float64
	done     int
	p50, p99 time.Duration
	failed   int
}

// connRate runs clients loops of connect, (header and) 1-byte echo, close
// until max connections or d have passed.
func connRate(t *target, clients, max int, d time.Duration) rateResult {
	var issued, failed atomic.Int64
	deadline := time.Now().Add(d)
	lats := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range clients {
		wg.Go(func() {
			for issued.Add(1) <= int64(max) && time.Now().Before(deadline) {
				s := time.Now()
				if err := echoOnce(t); err != nil {
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
	r := rateResult{failed: int(failed.Load()), done: len(all)}
	if len(all) > 0 {
		r.rate = float64(len(all)) / elapsed.Seconds()
		r.p50 = all[len(all)/2]
		r.p99 = all[len(all)*99/100]
	}
	return r
}

func echoOnce(t *target) error {
	c, err := dial(t)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	msg := []byte{'E'}
	if t.header {
		msg = append(header(), 'E')
	}
	if _, err := c.Write(msg); err != nil {
		return err
	}
	var r [1]byte
	_, err = io.ReadFull(c, r[:])
	return err
}

// idleCost opens n forwarded connections through t, each echoing one
// byte, holds them, and returns how many were held and the proxy's RSS
// (KiB) and file descriptors per connection.
func idleCost(t *target, n int) (ok int, rssKiB, fds float64) {
	time.Sleep(2 * time.Second)
	rss0, fd0 := procStats(t.pid)
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	var opened, next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				c, err := dial(t)
				if err != nil {
					continue
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				msg := []byte{'E'}
				if t.header {
					msg = append(header(), 'E')
				}
				var b [1]byte
				if _, err := c.Write(msg); err != nil {
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
	time.Sleep(2 * time.Second)
	rss1, fd1 := procStats(t.pid)
	ok = int(opened.Load())
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	for range 100 { // let the proxy let go of them before going on
		if _, fd := procStats(t.pid); fd <= fd0+16 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ok == 0 {
		return 0, 0, 0
	}
	return ok, float64(rss1-rss0) / float64(ok), float64(fd1-fd0) / float64(ok)
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

// cpuTime is the user+system CPU time pid has used (0 for pid 0).
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are
	// the 14th and 15th fields of the whole line.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz
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

func table(targets []*target, res map[string]*result) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "\n### Origin front benchmark (%s, %s, %d CPUs, load %s)\n\n", time.Now().UTC().Format(time.RFC3339), host, runtime.NumCPU(), loadavg())
	fmt.Fprintf(&b, "Short connections: %d clients, ≤ %d conns or %v per target and round; single stream %d MiB; median of %d rounds; idle: %d connections held. "+
		"Proxy CPU is user+system time of the proxy process. Both proxies log one line per connection to a file.\n\n",
		*clients, *maxConns, *connTime, *streamSize>>20, *rounds, *idleConns)
	b.WriteString("| target | conn/s | × HAProxy | p50 | p99 | failed | CPU µs/conn | throughput MiB/s | × HAProxy | CPU s/GiB | idle RSS KiB/conn | idle fds/conn |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	ref := res["haproxy"]
	ratio := func(x, r []float64) string {
		if r == nil || median(r) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", median(x)/median(r))
	}
	for _, t := range targets {
		x := res[t.name]
		var refRate, refTput []float64
		if ref != nil {
			refRate, refTput = ref.rate, ref.tput
		}
		cpuConn, cpuGiB := "–", "–"
		if t.pid != 0 {
			cpuConn = fmt.Sprintf("%.0f", median(x.cpuPerConn))
			cpuGiB = fmt.Sprintf("%.2f", median(x.cpuPerGiB))
		}
		idleRSS, idleFDs := "–", "–"
		if x.idleOK > 0 {
			idleRSS, idleFDs = fmt.Sprintf("%.1f", x.rssPerConn), fmt.Sprintf("%.2f", x.fdsPerConn)
			if x.idleOK < *idleConns {
				idleRSS += fmt.Sprintf(" (%d held)", x.idleOK)
			}
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %v | %v | %d | %s | %.0f | %s | %s | %s | %s |\n",
			t.name, median(x.rate), ratio(x.rate, refRate), median(x.p50).Round(time.Microsecond), median(x.p99).Round(time.Microsecond),
			slices.Max(append(x.failed, 0)), cpuConn, median(x.tput)/(1<<20), ratio(x.tput, refTput), cpuGiB, idleRSS, idleFDs)
	}
	b.WriteString("\n")
	return b.String()
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
