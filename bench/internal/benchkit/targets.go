package benchkit

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Target is one way from the clients to the service behind the proxies.
type Target struct {
	Name string
	Addr string
	PID  int // the proxy process; 0 for a direct connection
}

// Starter starts a target: its address and the process serving it (nil
// for none; two targets may share one).
type Starter func() (addr string, cmd *exec.Cmd, err error)

// StartTargets starts the targets named in list (comma-separated) with
// their starters, and waits for each to listen. procs holds every process
// started so far, also on error, for Stop; dir is named in a start-up
// error (the logs are there).
func StartTargets(list, dir string, starters map[string]Starter) (targets []*Target, procs []*exec.Cmd, err error) {
	for _, name := range strings.Split(list, ",") {
		t := &Target{Name: strings.TrimSpace(name)}
		start, ok := starters[t.Name]
		if !ok {
			return targets, procs, fmt.Errorf("unknown target %q", t.Name)
		}
		addr, cmd, err := start()
		if err != nil {
			return targets, procs, fmt.Errorf("%s: %w", t.Name, err)
		}
		t.Addr = addr
		if cmd != nil {
			if !slices.Contains(procs, cmd) {
				procs = append(procs, cmd)
			}
			t.PID = cmd.Process.Pid
		}
		if err := WaitTCP(t.Addr, 10*time.Second); err != nil {
			return targets, procs, fmt.Errorf("%s: %w (see %s)", t.Name, err, dir)
		}
		targets = append(targets, t)
	}
	return targets, procs, nil
}

// Result is what the rounds measured through one target.
type Result struct {
	Rate       []float64 // short connections per second, one per round
	P50, P99   []time.Duration
	Failed     []int
	CPUPerConn []float64 // µs of proxy CPU (user+system) per short connection
	Throttled  []float64 // share of the CPU cap's periods in which the proxy was throttled, per rate round (capped shapes)
	Tput       []float64 // single-stream bytes per second
	CPUPerGiB  []float64 // s of proxy CPU per GiB of the single stream
	IdleOK     int       // idle connections held
	RSSPerConn float64   // KiB per idle connection
	FDsPerConn float64   // file descriptors per idle connection
}

// Results is a Result for each target, by name.
func Results(targets []*Target) map[string]*Result {
	res := map[string]*Result{}
	for _, t := range targets {
		res[t.Name] = &Result{}
	}
	return res
}

// MeasureRate runs one round of ConnRate through the proxy pid (0: none),
// records it and returns it with the CPU time the proxy used.
func (x *Result) MeasureRate(pid, clients, max int, d time.Duration, once func() error) (Rate, time.Duration) {
	cpu0 := CPUTime(pid)
	n0, th0 := throttledPeriods(pid)
	cr := ConnRate(clients, max, d, once)
	cpu := CPUTime(pid) - cpu0
	if n1, th1 := throttledPeriods(pid); n1 > n0 {
		x.Throttled = append(x.Throttled, float64(th1-th0)/float64(n1-n0))
	}
	x.Rate = append(x.Rate, cr.Rate)
	x.P50 = append(x.P50, cr.P50)
	x.P99 = append(x.P99, cr.P99)
	x.Failed = append(x.Failed, cr.Failed)
	if pid != 0 && cr.OK > 0 {
		x.CPUPerConn = append(x.CPUPerConn, cpu.Seconds()*1e6/float64(cr.OK))
	}
	return cr, cpu
}

// MeasureThroughput runs one single stream of n bytes (after header), or
// as many as d allows, through the proxy pid, records it and returns it
// with the CPU time the proxy used.
func (x *Result) MeasureThroughput(pid int, dial func() (net.Conn, error), header []byte, n int64, d time.Duration) (float64, time.Duration, error) {
	cpu0 := CPUTime(pid)
	tp, sent, err := Throughput(dial, header, n, d)
	for try := 2; err != nil && try <= 3; try++ {
		// A loopback SYN may go unanswered for seconds on a busy machine
		// (a port reused from TIME_WAIT, an accept queue somebody else's
		// test filled): a dial timeout is retried, not the end of the run.
		fmt.Fprintf(os.Stderr, "bench: throughput: %v; try %d of 3\n", err, try)
		cpu0 = CPUTime(pid)
		tp, sent, err = Throughput(dial, header, n, d)
	}
	if err != nil {
		return 0, 0, err
	}
	cpu := CPUTime(pid) - cpu0
	x.Tput = append(x.Tput, tp)
	x.CPUPerGiB = append(x.CPUPerGiB, cpu.Seconds()/(float64(sent)/(1<<30)))
	return tp, cpu, nil
}

// Relay is x's medians as Verdicts compares them.
func (x *Result) Relay() Relay {
	return Relay{Throughput: Median(x.Tput), Rate: Median(x.Rate), CPUPerConn: Median(x.CPUPerConn),
		P99: Median(x.P99), RSSPerConn: x.RSSPerConn, FDsPerConn: x.FDsPerConn, IdleOK: x.IdleOK > 0}
}

// IdleCost opens n connections through the proxy pid (each sending msg()
// and reading a one-byte echo), holds them, records how many were held
// and the proxy's RSS (KiB) and file descriptors per connection, then
// closes them and waits for the proxy to let go. before runs just before
// they are opened, held while they are held (after the /proc reading);
// either may be nil.
func (x *Result) IdleCost(pid, n int, dial func() (net.Conn, error), msg func() []byte, before func(), held func(ok int)) {
	settle := func() { time.Sleep(2 * time.Second) }
	settle()
	if before != nil {
		before()
	}
	rss0, fd0 := ProcStats(pid)
	conns, ok := Hold(n, dial, msg)
	settle()
	rss1, fd1 := ProcStats(pid)
	if held != nil {
		held(ok)
	}
	CloseAll(conns)
	WaitFDs(pid, fd0+16) // the proxy lets go of them before the next target
	x.IdleOK, x.RSSPerConn, x.FDsPerConn = ok, 0, 0
	if ok > 0 {
		x.RSSPerConn, x.FDsPerConn = float64(rss1-rss0)/float64(ok), float64(fd1-fd0)/float64(ok)
	}
}

// HAProxyConfig is the HAProxy 2.6 configuration the benchmarks compare
// with: mode tcp, option splice-auto, maxconn 7000 (2 fds a connection
// plus maxpipes, maxconn/4, pipes: about 17,500, inside the 20,000 a
// process may hold here), then proxies. logged adds one line per
// connection to stdout (option tcplog), as our relays log; threads > 0
// sets nbthread (0: HAProxy's default, one per CPU it may run on).
func HAProxyConfig(logged bool, threads int, proxies string) string {
	global, defaults := "", ""
	if logged {
		global, defaults = "    log stdout format raw daemon\n", "    log global\n    option tcplog\n"
	}
	if threads > 0 {
		global += fmt.Sprintf("    nbthread %d\n", threads)
	}
	return "global\n    maxconn 7000\n" + global + "defaults\n    mode tcp\n" + defaults +
		"    option splice-auto\n    timeout connect 5s\n    timeout client 1h\n    timeout server 1h\n" + proxies
}

// StartHAProxy runs bin (HAProxy) on a free loopback address with
// HAProxyConfig(logged, s.Threads(), proxies(addr)), placed as s says.
func StartHAProxy(s *Shape, dir, bin string, logged bool, proxies func(addr string) string) (string, *exec.Cmd, error) {
	addr, err := FreeAddr()
	if err != nil {
		return "", nil, err
	}
	path, err := WriteConfig(dir, "haproxy.cfg", HAProxyConfig(logged, s.Threads(), proxies(addr)))
	if err != nil {
		return "", nil, err
	}
	cmd, err := s.Start(dir, "haproxy", bin, "-db", "-f", path)
	return addr, cmd, err
}
