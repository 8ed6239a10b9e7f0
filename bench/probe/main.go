// Command probe measures what edge selection costs and what a client gets
// without it, in one run, on loopback. It is run by `make bench`
// (scripts/bench.sh):
//
//	go run ./bench/probe
//	go run ./bench/probe -budget 300ms -connect-timeout 1s -rounds 1   # a smoke run
//
// Ranking: N = 2, 8 and 32 addresses sharing one port, half of them our
// edges in front of a real origin (front, core with mTLS, slapd), half
// black holes (SYNs unanswered), ranked by probe.Measure with one budget
// each, in parallel; the wall time should be one budget however many
// black holes (target ≤ budget + 10 %). A row with refused addresses
// instead shows they cost nothing measurable.
//
// Free failover: Go's default dialer (net.Dialer with a connect timeout)
// and curl, given a name whose A set has a black-holed address first and
// then 1, 2 or 3 working ones, each with the same connect timeout (6 s);
// the time to connect is the failover cost each client pays on every
// connection. A refused address first is the control: refusals are free.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/bench/internal/benchkit"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
	"github.com/edgefleet/edgefleet/probe"
	"github.com/miekg/dns"
)

var (
	budget     = flag.Duration("budget", probe.DefaultBudget, "probe budget per address")
	sizes      = flag.String("n", "2,8,32", "comma-separated numbers of addresses to rank (half black holes)")
	rounds     = flag.Int("rounds", 3, "rankings per size (median reported)")
	connTO     = flag.Duration("connect-timeout", 6*time.Second, "connect timeout of the Go dialer and curl")
	failCounts = flag.String("a", "2,3,4", "comma-separated A-set sizes for the failover measurement")
	curlBin    = flag.String("curl", "curl", "curl binary")
	out        = flag.String("out", "bench/results/probe.md", "also write the tables here (empty: stdout only)")
	keep       = flag.Bool("keep", false, "keep the temp dir")
)

func main() { benchkit.Main("probe", run) }

func run() error {
	dir, cleanup, err := benchkit.TempDir("probe", *keep)
	if err != nil {
		return err
	}
	defer cleanup()
	o, err := stack.New(dir)
	if err != nil {
		return fmt.Errorf("origin: %w", err)
	}
	defer o.Close()

	var b strings.Builder
	b.WriteString(benchkit.Heading("probe: ranking cost"))
	rows, err := rankings(o)
	if err != nil {
		return err
	}
	b.WriteString(rows)
	b.WriteString(benchkit.Heading("probe: what a client gets for free"))
	rows, err = failover()
	if err != nil {
		return err
	}
	b.WriteString(rows)
	fmt.Print(b.String())
	benchkit.WriteReport(*out, b.String())
	return nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// rankings measures the wall time of ranking N addresses, half of them
// black holes (or refused).
func rankings(o *stack.Origin) (string, error) {
	ns, err := ints(*sizes)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "budget %v per address, %d rankings per row (median)\n\n", *budget, *rounds)
	b.WriteString("| addresses | edges | failures | wall time | / budget | target ≤ budget + 10 % |\n|---|---|---|---|---|---|\n")
	type row struct {
		n    int
		kind string
	}
	var plan []row
	for _, n := range ns {
		plan = append(plan, row{n, "black holes"})
	}
	plan = append(plan, row{8, "refused"})
	conf := o.AgentTLS()
	for _, r := range plan {
		ips, port, closeFn, err := fleet(o, r.n, r.kind)
		if err != nil {
			return "", err
		}
		var walls []time.Duration
		var okCount int
		for range *rounds {
			if err := benchkit.Interrupted(); err != nil {
				closeFn()
				return "", err
			}
			start := time.Now()
			res := probe.Measure(context.Background(), ips, port, func(ctx context.Context, addr string) probe.Result {
				return probe.Probe(ctx, addr, conf, *budget)
			})
			walls = append(walls, time.Since(start))
			okCount = 0
			for _, x := range res {
				if x.OK {
					okCount++
				}
			}
		}
		closeFn()
		if okCount != r.n-r.n/2 {
			return "", fmt.Errorf("ranking %d: %d edges answered, want %d", r.n, okCount, r.n-r.n/2)
		}
		wall := benchkit.Median(walls)
		ratio := float64(wall) / float64(*budget)
		verdict := "met"
		if r.kind == "black holes" && ratio > 1.10 {
			verdict = "missed"
		}
		if r.kind == "refused" {
			verdict = "(refusals: no budget spent)"
			if ratio > 0.5 {
				verdict = "missed: refusals cost time"
			}
		}
		fmt.Fprintf(&b, "| %d | %d | %d %s | %s | %.2f | %s |\n", r.n, r.n-r.n/2, r.n/2, r.kind, roundDur(wall), ratio, verdict)
	}
	return b.String(), nil
}

// fleet lays out n addresses on one port: the first half-rounded-up are
// our edges, the rest black holes or refused.
func fleet(o *stack.Origin, n int, failure string) (ips []string, port int, closeFn func(), err error) {
	var closers []func()
	closeFn = func() {
		for _, c := range closers {
			c()
		}
	}
	ipAt := func(i int) string { return fmt.Sprintf("127.0.%d.%d", 10+i/200, 2+i%200) }
	port, err = sharedPort(n, ipAt)
	if err != nil {
		return nil, 0, nil, err
	}
	for i := range n {
		ip := ipAt(i)
		addr := net.JoinHostPort(ip, strconv.Itoa(port))
		ips = append(ips, ip)
		switch {
		case i < n-n/2:
			e, err := o.NewEdge("edge-"+ip, addr)
			if err != nil {
				closeFn()
				return nil, 0, nil, err
			}
			closers = append(closers, e.Stop)
		case failure == "black holes":
			_, c, err := testbed.NewBlackHoleAt(addr)
			if err != nil {
				closeFn()
				return nil, 0, nil, err
			}
			closers = append(closers, c)
		}
	}
	return ips, port, closeFn, nil
}

// sharedPort is a port free on the first n addresses of ipAt.
func sharedPort(n int, ipAt func(int) string) (int, error) {
	ips := make([]string, n)
	for i := range ips {
		ips[i] = ipAt(i)
	}
	return stack.SharedPort(ips)
}

// failover measures Go's dialer and curl on A sets with a dead address
// first: a black hole, or (the control) a refused one.
func failover() (string, error) {
	counts, err := ints(*failCounts)
	if err != nil {
		return "", err
	}
	maxN := 0
	for _, n := range counts {
		maxN = max(maxN, n)
	}
	// 127.0.0.2: the black hole; 127.0.0.3: refused; .4 on: HTTP servers.
	ipAt := func(i int) string { return fmt.Sprintf("127.0.0.%d", 2+i) }
	port, err := sharedPort(maxN+2, ipAt)
	if err != nil {
		return "", err
	}
	ps := strconv.Itoa(port)
	_, closeHole, err := testbed.NewBlackHoleAt(net.JoinHostPort(ipAt(0), ps))
	if err != nil {
		return "", err
	}
	defer closeHole()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }),
		ReadHeaderTimeout: 5 * time.Second}
	defer srv.Close()
	var good []string
	for i := range maxN - 1 {
		ln, err := net.Listen("tcp", net.JoinHostPort(ipAt(2+i), ps))
		if err != nil {
			return "", err
		}
		go srv.Serve(ln)
		good = append(good, ipAt(2+i))
	}

	// One name per A set, answered in exactly this order by a DNS server
	// of our own (named rotates its answers; the order is the point here).
	sets, plan := failoverPlan(counts, ipAt(0), ipAt(1), good)
	dnsAddr, stopDNS, err := serveDNS(sets)
	if err != nil {
		return "", err
	}
	defer stopDNS()
	resolver := probe.DNSResolver(dnsAddr)
	curl, curlErr := benchkit.LookPath(*curlBin)

	var b strings.Builder
	fmt.Fprintf(&b, "connect timeout %v; the A set lists the dead address first, then working ones\n\n", *connTO)
	b.WriteString("| first address | A-set size | Go net.Dialer | curl | probe rank (once, then the best edge directly) |\n|---|---|---|---|---|\n")
	for _, s := range plan {
		if err := benchkit.Interrupted(); err != nil {
			return "", err
		}
		host := strings.TrimSuffix(s.name, ".")
		start := time.Now()
		d := net.Dialer{Timeout: *connTO, Resolver: resolver}
		c, err := d.Dial("tcp", net.JoinHostPort(host, ps))
		goCell := roundDur(time.Since(start))
		if err != nil {
			goCell = "failed: " + err.Error()
		} else {
			c.Close()
		}
		curlCell := "curl not installed"
		if curlErr == nil {
			curlCell = curlConnect(curl, host, ps, sets[s.name])
		}
		rankCell := "≤ one budget (" + budget.String() + ")"
		if s.first == "refused" {
			rankCell = "nothing measurable"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", s.first, s.n, goCell, curlCell, rankCell)
	}
	return b.String(), nil
}

// failoverSet is one row of the failover table: a name whose A set
// lists a dead address (first: "black hole" or "refused") and n-1
// working ones.
type failoverSet struct {
	name, first string
	n           int
}

// failoverPlan is the failover table's rows, for each dead address
// (hole, then refused) and each A-set size of counts from 2 up, and the
// A set of each row's name.
func failoverPlan(counts []int, hole, refused string, good []string) (map[string][]string, []failoverSet) {
	sets := map[string][]string{}
	var plan []failoverSet
	for _, first := range []string{"black hole", "refused"} {
		dead := hole
		if first == "refused" {
			dead = refused
		}
		for _, n := range counts {
			if n < 2 {
				continue
			}
			name := fmt.Sprintf("n%d-%s.bench.test.", n, strings.ReplaceAll(first, " ", "-"))
			sets[name] = append([]string{dead}, good[:n-1]...)
			plan = append(plan, failoverSet{name, first, n})
		}
	}
	return sets, plan
}

// curlConnect runs curl against host with its A set pinned (--resolve
// keeps the order) and reports its time to connect.
func curlConnect(curl, host, port string, ips []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 3**connTO)
	defer cancel()
	cmd := exec.CommandContext(ctx, curl, "-s", "-o", "/dev/null", "--connect-timeout", strconv.FormatFloat(connTO.Seconds(), 'f', -1, 64),
		"--resolve", host+":"+port+":"+strings.Join(ips, ","), "-w", "%{time_connect}", "http://"+host+":"+port+"/")
	outb, err := cmd.Output()
	if err != nil {
		return "failed: " + err.Error()
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(string(outb)), 64)
	if err != nil {
		return "unreadable: " + string(outb)
	}
	return roundDur(time.Duration(secs * float64(time.Second)))
}

// serveDNS answers A queries for the names of sets, in order, on a free
// loopback UDP port; every other question gets an empty answer.
func serveDNS(sets map[string][]string) (string, func(), error) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		for _, question := range q.Question {
			ips, ok := sets[strings.ToLower(question.Name)]
			if !ok {
				m.Rcode = dns.RcodeNameError
				continue
			}
			if question.Qtype != dns.TypeA {
				continue
			}
			for _, ip := range ips {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: question.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0},
					A: net.ParseIP(ip)})
			}
		}
		w.WriteMsg(m)
	})
	srv := &dns.Server{PacketConn: pc, Handler: h}
	go srv.ActivateAndServe()
	return pc.LocalAddr().String(), func() { srv.Shutdown() }, nil
}

// roundDur keeps three significant figures or so: 2.003s, 41ms, 0.31ms.
func roundDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond).String()
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + "ms"
}
