// Command core benchmarks the LDAP routing core against direct slapd and
// slapd back-ldap as a proxy, side by side in one run, and prints a
// Markdown table with the ratios.
//
//	go run ./bench/core                 # 1, 16 and 64 clients, 3 s per cell
//	go run ./bench/core -d 5s -c 1,64
//	go run ./bench/core -bare          # also a bare TCP relay: the floor of a hop in Go
//
// Every target serves the same slapd directory (three are started; the
// core and back-ldap both list the first two in failover order, so all
// their traffic goes to the first). A second core balances every
// operation over all three with a proportional LoadBalancer (equal
// weights): the balancer's cost against the one-server rule, in the same
// run. All slapds share the machine's cores, so no scaling can show. Clients are lean: prebuilt PDUs over a raw socket, framed
// with ldap/wire, so the figures show the servers, not the client
// library.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/bench/internal/benchkit"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
	"github.com/prometheus/client_golang/prometheus"
)

func main() {
	dur := flag.Duration("d", time.Second, "duration of each sample")
	rounds := flag.Int("r", 3, "samples per cell; targets alternate, the median is reported")
	clients := flag.String("c", "1,16,64", "comma-separated numbers of concurrent clients")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (core included) to this file")
	blockprofile := flag.String("blockprofile", "", "write a profile of where goroutines blocked (channels, locks, conds; not the network) to this file at the end")
	mutexprofile := flag.String("mutexprofile", "", "write a profile of contended mutexes to this file at the end")
	out := flag.String("out", "bench/results/core.md", "also write the table here (empty: stdout only)")
	serve := flag.Bool("serve", false, "only start a slapd and the core (forwardto(L1,L2)), print their addresses and the pid, and serve until interrupted: for strace -p or perf stat -p on the core alone")
	load := flag.String("load", "", "only run the clients against this address (-c clients, -w workload) for -n operations in all, and print ops/s")
	bare := flag.Bool("bare", false, "also measure a bare TCP relay in front of the first slapd (a goroutine per direction, no LDAP): the floor of a hop in Go")
	relay := flag.String("relay", "", "only run a bare relay (as -bare) to this address, print its address and the pid, and serve until interrupted: its CPU per operation apart from the core's")
	workload := flag.String("w", "search", "with -load: search or bind+search")
	nOps := flag.Int64("n", 10000, "with -load: operations in all")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/core:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *blockprofile != "" {
		runtime.SetBlockProfileRate(1)
		defer writeProfile("block", *blockprofile)
	}
	if *mutexprofile != "" {
		runtime.SetMutexProfileFraction(1)
		defer writeProfile("mutex", *mutexprofile)
	}
	switch {
	case *serve:
		if err := serveOnly(); err != nil {
			fmt.Fprintln(os.Stderr, "bench/core:", err)
			os.Exit(1)
		}
		return
	case *relay != "":
		addr, stop, err := bareRelay(*relay)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/core:", err)
			os.Exit(1)
		}
		fmt.Printf("relay %s pid %d\n", addr, os.Getpid())
		waitSignal()
		stop()
		return
	case *load != "":
		if err := loadOnly(*load, *workload, *clients, *nOps); err != nil {
			fmt.Fprintln(os.Stderr, "bench/core:", err)
			os.Exit(1)
		}
		return
	}
	var w io.Writer = os.Stdout
	var buf bytes.Buffer
	if *out != "" {
		w = io.MultiWriter(os.Stdout, &buf)
	}
	if err := run(w, *dur, *rounds, *clients, *bare); err != nil {
		fmt.Fprintln(os.Stderr, "bench/core:", err)
		os.Exit(1)
	}
	if *out != "" {
		if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench/core:", err)
			os.Exit(1)
		}
	}
}

// writeProfile writes the runtime profile name (block, mutex) to path.
func writeProfile(name, path string) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup(name).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/core:", err)
	}
}

type target struct{ name, addr string }

// run measures the targets (startTargets, and with bare the bare relay)
// for each workload and client count of clientList, and writes the table
// to w.
func run(w io.Writer, dur time.Duration, rounds int, clientList string, bare bool) error {
	var counts []int
	for _, s := range strings.Split(clientList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-c: %q is not a positive number", s)
		}
		counts = append(counts, n)
	}
	dir, err := os.MkdirTemp("", "bench-core-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	targets, stop, err := startTargets(dir)
	defer stop()
	if err != nil {
		return err
	}
	if bare {
		addr, stopRelay, err := bareRelay(targets[0].addr)
		if err != nil {
			return err
		}
		defer stopRelay()
		targets = append(targets, target{"bare relay", addr})
	}

	fmt.Fprintf(w, "LDAP core benchmark, %s: %d samples of %v per target and cell, alternating targets, medians; %d CPUs\n\n",
		time.Now().UTC().Format(time.RFC3339), rounds, dur, runtime.NumCPU())
	head, rule := "", ""
	if bare {
		head, rule = " bare relay ops/s | bare ÷ direct |", "---:|---:|"
	}
	fmt.Fprintln(w, "| workload | clients | direct slapd ops/s | core ops/s | back-ldap ops/s | core ÷ back-ldap | core ÷ direct | proportional ×3 ops/s | proportional ÷ core |"+head)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"+rule)
	for _, wl := range []string{"bind+search", "search"} {
		for _, n := range counts {
			rates, err := rates(targets, wl, n, dur, rounds)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %.0f | %.2f× | %.2f× | %.0f | %.2f× |", wl, n, rates[0], rates[1], rates[2],
				rates[1]/rates[2], rates[1]/rates[0], rates[3], rates[3]/rates[1])
			if bare {
				fmt.Fprintf(w, " %.0f | %.2f× |", rates[4], rates[4]/rates[0])
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w, "\nops/s: bind+search counts one bind and one search as one operation pair; search counts searches (bound once).")
	return nil
}

// startTargets starts three slapds, back-ldap over two of them, and two
// cores (one server pair; proportional over three), their files under
// dir. The targets are in the table's order; stop (never nil) stops
// what started, also after an error.
func startTargets(dir string) (targets []target, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	start := func(name string, cfg testbed.SlapdConfig) (*testbed.Slapd, error) {
		d := dir + "/" + name
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
		s, err := testbed.NewSlapd(d, cfg)
		if err == nil {
			stops = append(stops, func() { s.Close() })
		}
		return s, err
	}
	l1, err := start("ldap1", testbed.SlapdConfig{})
	if err != nil {
		return nil, stop, err
	}
	l2, err := start("ldap2", testbed.SlapdConfig{})
	if err != nil {
		return nil, stop, err
	}
	l3, err := start("ldap3", testbed.SlapdConfig{})
	if err != nil {
		return nil, stop, err
	}
	backLDAP, err := start("back-ldap", testbed.SlapdConfig{Proxy: []string{l1.URL, l2.URL}})
	if err != nil {
		return nil, stop, err
	}
	coreAddr, stopCore, err := startCore(oneServer(l1.Addr, l2.Addr))
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, stopCore)
	balancedAddr, stopBalanced, err := startCore(proportional(l1.Addr, l2.Addr, l3.Addr))
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, stopBalanced)
	return []target{{"direct slapd", l1.Addr}, {"core", coreAddr}, {"back-ldap", backLDAP.Addr}, {"core proportional ×3", balancedAddr}}, stop, nil
}

// rates is each target's median rate of workload wl with n clients over
// rounds samples of dur, each round starting with another target.
func rates(targets []target, wl string, n int, dur time.Duration, rounds int) ([]float64, error) {
	samples := make([][]float64, len(targets))
	for round := range rounds {
		for k := range targets {
			i := (k + round) % len(targets)
			tg := targets[i]
			r, err := measure(tg.addr, wl, n, dur)
			if err != nil {
				return nil, fmt.Errorf("%s %s %d clients: %w", tg.name, wl, n, err)
			}
			samples[i] = append(samples[i], r)
		}
	}
	rates := make([]float64, len(targets))
	for i, s := range samples {
		rates[i] = benchkit.Median(s)
	}
	return rates, nil
}

// serveOnly runs the core's side of the benchmark in this process alone:
// its syscalls and CPU time per operation are then its own (the slapds
// are child processes, which strace -p and /proc/<pid>/stat leave out).
func serveOnly() error {
	dir, err := os.MkdirTemp("", "bench-core-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var slapds []*testbed.Slapd
	defer func() {
		for _, s := range slapds {
			s.Close()
		}
	}()
	for _, name := range []string{"ldap1", "ldap2"} {
		if err := os.Mkdir(dir+"/"+name, 0o700); err != nil {
			return err
		}
		s, err := testbed.NewSlapd(dir+"/"+name, testbed.SlapdConfig{})
		if err != nil {
			return err
		}
		slapds = append(slapds, s)
	}
	addr, stop, err := startCore(oneServer(slapds[0].Addr, slapds[1].Addr))
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("core %s direct %s pid %d\n", addr, slapds[0].Addr, os.Getpid())
	waitSignal()
	return nil
}

// waitSignal returns on SIGINT or SIGTERM.
func waitSignal() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
}

// loadOnly runs the clients of -c (the first number) against addr until
// n operations are done in all.
func loadOnly(addr, workload, clients string, n int64) error {
	c, err := strconv.Atoi(strings.Split(clients, ",")[0])
	if err != nil || c < 1 {
		return fmt.Errorf("-c: %q is not a positive number", clients)
	}
	var ops atomic.Int64
	ops.Store(-n) // clients stop once it reaches 0
	start := time.Now()
	_, err = runClients(addr, workload, c, time.Now().Add(time.Hour), &ops)
	done := n + ops.Load() // a client may finish one past n
	fmt.Printf("%s %s %d clients: %d operations, %.0f ops/s\n", addr, workload, c, done, float64(done)/time.Since(start).Seconds())
	return err
}

// servers renders LdapServer objects L1, L2, … for the addresses.
func servers(addrs ...string) string {
	var b strings.Builder
	for i, a := range addrs {
		h, p, _ := net.SplitHostPort(a)
		fmt.Fprintf(&b, "  {\"object\": \"LdapServer\", \"name\": \"L%d\", \"host\": %q, \"port\": %s},\n", i+1, h, p)
	}
	return b.String()
}

// oneServer routes everyone to the first server, with failover to the
// second.
func oneServer(l1, l2 string) string {
	return "[\n" + servers(l1, l2) + `  {"object": "ProxyRule", "ruleType": "UserRouting", "name": "ALL", "condition": "(user=*)", "actions": ["forwardto(L1,L2)"], "loadbalance": 0},
  {"object": "LdapProxy", "name": "ldapConfiguration", "rules": ["ALL"]}
]`
}

// proportional balances every operation over the three servers, equal
// weights.
func proportional(l1, l2, l3 string) string {
	return "[\n" + servers(l1, l2, l3) + `  {"object": "LoadBalancer", "name": "PROP", "algorithm": "proportional", "routes": [{"server": "L1"}, {"server": "L2"}, {"server": "L3"}]},
  {"object": "ProxyRule", "ruleType": "UserRouting", "name": "ALL", "condition": "(user=*)", "actions": ["balance(PROP)"]},
  {"object": "LdapProxy", "name": "ldapConfiguration", "rules": ["ALL"]}
]`
}

// startCore runs a core in this process with the DLP file src.
func startCore(src string) (string, func(), error) {
	f, err := dlp.Parse("bench.json", []byte(src))
	if err != nil {
		return "", nil, err
	}
	srv, err := core.New(core.DefaultConfig(), f, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go srv.Serve(ln)
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// bareRelay relays every connection it accepts to addr and back, a
// goroutine per direction copying with 8 KiB reads: what any hop written
// in Go pays in system calls and scheduling, without the core's LDAP
// work. A bench-only yardstick (-bare).
func bareRelay(addr string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	track := func(c net.Conn, add bool) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			return false
		}
		if add {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
		return true
	}
	copyTo := func(dst, src net.Conn) {
		buf := make([]byte, 8<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					err = werr
				}
			}
			if err != nil {
				dst.Close()
				src.Close()
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				s, err := net.Dial("tcp", addr)
				if err != nil {
					c.Close()
					return
				}
				if !track(c, true) || !track(s, true) {
					c.Close()
					s.Close()
					return
				}
				go copyTo(s, c)
				copyTo(c, s)
				track(c, false)
				track(s, false)
			}()
		}
	}()
	return ln.Addr().String(), func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range conns {
			c.Close()
		}
		conns = nil
	}, nil
}

// measure runs n clients doing the workload for d and returns ops/s.
func measure(addr, workload string, n int, d time.Duration) (float64, error) {
	var ops atomic.Int64
	ops.Store(-1 << 62)
	return runClients(addr, workload, n, time.Now().Add(d), &ops)
}

// runClients runs n clients until the deadline or until ops, which
// counts operations from where it stands, reaches 0; it returns ops/s.
func runClients(addr, workload string, n int, deadline time.Time, ops *atomic.Int64) (float64, error) {
	from := ops.Load()
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := client(addr, workload, deadline, ops); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	return float64(ops.Load()-from) / time.Since(start).Seconds(), firstErr
}

var (
	user = []byte(testbed.User("alice"))
	pw   = []byte("alice-pw")
)

func client(addr, workload string, deadline time.Time, ops *atomic.Int64) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	rd := wire.NewReader(c)
	id := int32(0)
	roundTrip := func(req []byte, final byte) error {
		if _, err := c.Write(req); err != nil {
			return err
		}
		for {
			raw, err := rd.Next()
			if err != nil {
				return err
			}
			m, err := wire.Parse(raw)
			if err != nil {
				return err
			}
			if m.Op == final {
				if m.ResultCode != 0 {
					return fmt.Errorf("result %s: %s", wire.ResultName(m.ResultCode), m.Diagnostic)
				}
				return nil
			}
		}
	}
	bind := func() error {
		id++
		return roundTrip(wire.BindRequest(id, string(user), pw), wire.TagBindResponse)
	}
	search := func() error {
		id++
		return roundTrip(searchRequest(id), wire.TagSearchResultDone)
	}
	if workload == "search" {
		if err := bind(); err != nil {
			return err
		}
	}
	for ops.Load() < 0 && time.Now().Before(deadline) {
		if workload == "bind+search" {
			if err := bind(); err != nil {
				return err
			}
		}
		if err := search(); err != nil {
			return err
		}
		ops.Add(1)
	}
	id++
	c.Write(wire.UnbindRequest(id))
	return nil
}

// searchRequest is a subtree search for (uid=bob) under ou=people,
// returning cn: one entry.
func searchRequest(id int32) []byte {
	base := "ou=people," + testbed.Suffix
	filter := tlv(0xa3, append(tlv(0x04, []byte("uid")), tlv(0x04, []byte("bob"))...)) // equalityMatch
	attrs := tlv(0x30, tlv(0x04, []byte("cn")))
	body := concat(tlv(0x04, []byte(base)), tlv(0x0a, []byte{2}), tlv(0x0a, []byte{0}),
		tlv(0x02, []byte{0}), tlv(0x02, []byte{0}), tlv(0x01, []byte{0}), filter, attrs)
	return tlv(0x30, concat(tlv(0x02, intBytes(id)), tlv(0x63, body)))
}

func intBytes(v int32) []byte {
	b := []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
	for len(b) > 1 && b[0] == 0 && b[1]&0x80 == 0 {
		b = b[1:]
	}
	return b
}

func tlv(tag byte, v []byte) []byte {
	n := len(v)
	var hdr []byte
	switch {
	case n < 0x80:
		hdr = []byte{tag, byte(n)}
	case n < 0x100:
		hdr = []byte{tag, 0x81, byte(n)}
	default:
		hdr = []byte{tag, 0x82, byte(n >> 8), byte(n)}
	}
	return append(hdr, v...)
}

func concat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
