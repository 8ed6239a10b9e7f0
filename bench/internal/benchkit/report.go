package benchkit

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"flag"
)

// Median of xs (the upper one for an even count), 0 for none.
func Median[T int | float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// Last of xs, 0 for none: the round just measured.
func Last(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}

// Heading is the report's title line, with when, where and how loaded
// the machine was.
func Heading(title string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("\n### %s (%s, %s, %d CPUs, load %s)\n\n", title, time.Now().UTC().Format(time.RFC3339), host, runtime.NumCPU(), Loadavg())
}

// WriteReport also writes report to path, unless path is empty; a
// failure to write is not worth failing the run over.
func WriteReport(path, report string) {
	if path == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		os.WriteFile(path, []byte(report), 0o644)
	}
}

// Turn is the order the targets take in round r: as listed in even
// rounds, reversed in odd ones, so no contender always runs right after
// the same other one (docs/architecture.md: contenders in alternating order).
func Turn[T any](targets []T, r int) []T {
	if r%2 == 0 {
		return targets
	}
	s := slices.Clone(targets)
	slices.Reverse(s)
	return s
}

// Relay is what the relay benchmarks measured of one relay, for Verdicts.
type Relay struct {
	Throughput, Rate float64       // bytes/s and connections/s (medians)
	CPUPerConn       float64       // µs of the relay's user+system time per short connection (median)
	P99              time.Duration // of a short connection (median over rounds)
	RSSPerConn       float64       // KiB per idle relayed connection
	FDsPerConn       float64
	IdleOK           bool // the idle measurement ran
}

// Verdicts is the table of the relay targets for ours against HAProxy's
// figures from the same run in shape s: architecture.md's, with issue 24's
// rate for the shape (Shape.MinRate) and its idle bound of 1 KiB.
func Verdicts(name string, s *Shape, ours, hap Relay) string {
	var b strings.Builder
	ratio := func(x, y float64) float64 {
		if y == 0 {
			return 0
		}
		return x / y
	}
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	tp, cr, cpu := ratio(ours.Throughput, hap.Throughput), ratio(ours.Rate, hap.Rate), ratio(ours.CPUPerConn, hap.CPUPerConn)
	fmt.Fprintf(&b, "\n| %s vs HAProxy, %s | ours | HAProxy | ratio | target ([benchmarks](benchmarks.md#two-shapes)) | met |\n|---|---:|---:|---:|---|---|\n", name, s.Name)
	fmt.Fprintf(&b, "| throughput MiB/s | %.0f | %.0f | %.2f× | ≥ 1.5× | %s |\n", ours.Throughput/(1<<20), hap.Throughput/(1<<20), tp, yes(tp >= 1.5))
	fmt.Fprintf(&b, "| short connections/s | %.0f | %.0f | %.2f× | ≥ %.1f× | %s |\n", ours.Rate, hap.Rate, cr, s.MinRate(), yes(cr >= s.MinRate()))
	fmt.Fprintf(&b, "| CPU µs per short connection | %.0f | %.0f | %.2f× | ≤ 1.0× | %s |\n", ours.CPUPerConn, hap.CPUPerConn, cpu, yes(cpu > 0 && cpu <= 1))
	fmt.Fprintf(&b, "| p99 of a short connection | %v | %v | %.2f× | ≤ 1.0× | %s |\n", ours.P99.Round(time.Microsecond), hap.P99.Round(time.Microsecond),
		ratio(float64(ours.P99), float64(hap.P99)), yes(ours.P99 <= hap.P99))
	if ours.IdleOK {
		fmt.Fprintf(&b, "| idle RSS KiB per connection | %.2f | %.2f | | ≤ 1 KiB | %s |\n", ours.RSSPerConn, hap.RSSPerConn, yes(ours.RSSPerConn <= 1))
		fmt.Fprintf(&b, "| idle fds per connection | %.3f | %.3f | | ≤ 2 | %s |\n", ours.FDsPerConn, hap.FDsPerConn, yes(ours.FDsPerConn <= 2))
	}
	return b.String()
}

// BalanceNote compares the edge balancing round robin over two backends
// (rr) with the edge failing over along one (one), in the same run: the
// origin pool's balancing should cost nothing measurable
// (docs/origin-pool.md).
func BalanceNote(one, rr Relay) string {
	ratio := func(x, y float64) float64 {
		if y == 0 {
			return 0
		}
		return x / y
	}
	return fmt.Sprintf("\n| edge, round robin over 2 origins vs failover over 1 | failover, 1 | round robin, 2 | ratio |\n|---|---:|---:|---:|\n"+
		"| throughput MiB/s | %.0f | %.0f | %.2f× |\n| short connections/s | %.0f | %.0f | %.2f× |\n| CPU µs per short connection | %.0f | %.0f | %.2f× |\n"+
		"| p99 of a short connection | %v | %v | %.2f× |\n",
		one.Throughput/(1<<20), rr.Throughput/(1<<20), ratio(rr.Throughput, one.Throughput),
		one.Rate, rr.Rate, ratio(rr.Rate, one.Rate), one.CPUPerConn, rr.CPUPerConn, ratio(rr.CPUPerConn, one.CPUPerConn),
		one.P99.Round(time.Microsecond), rr.P99.Round(time.Microsecond), ratio(float64(rr.P99), float64(one.P99)))
}

// ThrottleNote is the report's line on how often the CPU cap held each
// capped target back during the rate rounds ("" when none was capped):
// near 100 % means the relay, not the load side, set the rate.
func ThrottleNote(targets []*Target, res map[string]*Result) string {
	var parts, loose []string
	for _, t := range targets {
		if th := res[t.Name].Throttled; len(th) > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f %%", t.Name, 100*Median(th)))
			if Median(th) < 0.5 {
				loose = append(loose, t.Name)
			}
		}
	}
	if len(parts) == 0 {
		return ""
	}
	note := "\nThe cap throttled the relay in " + strings.Join(parts, ", ") + " of its 100 ms periods during the rate rounds (median)."
	if len(loose) > 0 {
		note += " **Under 50 % for " + strings.Join(loose, ", ") + ": the cap was not what held them back (the load side or other work on the machine was), " +
			"so their rate ratios do not measure the relays' efficiency; rerun on a quiet machine.**"
	}
	return note + "\n"
}

// Table is the Markdown table of what the rounds measured through each
// target, with ratios against the target named "haproxy" when there is
// one; idle is the number of idle connections asked for.
func Table(targets []*Target, res map[string]*Result, idle int) string {
	var b strings.Builder
	b.WriteString("| target | conn/s | × HAProxy | p50 | p99 | failed | CPU µs/conn | throughput MiB/s | × HAProxy | CPU s/GiB | idle RSS KiB/conn | idle fds/conn |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	ref := res["haproxy"]
	ratio := func(x, r []float64) string {
		if r == nil || Median(r) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", Median(x)/Median(r))
	}
	for _, t := range targets {
		x := res[t.Name]
		var refRate, refTput []float64
		if ref != nil {
			refRate, refTput = ref.Rate, ref.Tput
		}
		cpuConn, cpuGiB := "–", "–"
		if t.PID != 0 {
			cpuConn = fmt.Sprintf("%.0f", Median(x.CPUPerConn))
			cpuGiB = fmt.Sprintf("%.2f", Median(x.CPUPerGiB))
		}
		idleRSS, idleFDs := "–", "–"
		if x.IdleOK > 0 {
			idleRSS, idleFDs = fmt.Sprintf("%.2f", x.RSSPerConn), fmt.Sprintf("%.3f", x.FDsPerConn)
			if x.IdleOK < idle {
				idleRSS += fmt.Sprintf(" (%d held)", x.IdleOK)
			}
		}
		failed := 0
		for _, f := range x.Failed {
			failed += f
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %v | %v | %d | %s | %.0f | %s | %s | %s | %s |\n",
			t.Name, Median(x.Rate), ratio(x.Rate, refRate), Median(x.P50).Round(time.Microsecond), Median(x.P99).Round(time.Microsecond),
			failed, cpuConn, Median(x.Tput)/(1<<20), ratio(x.Tput, refTput), cpuGiB, idleRSS, idleFDs)
	}
	return b.String()
}

// Main parses the flags and runs a benchmark program; an error is one
// line "bench/<name>: <err>" and exit status 1. SIGTERM or SIGINT ends
// the run, its cleanups done (runInterruptible), with exit status 1.
func Main(name string, run func() error) {
	flag.Parse()
	if err := runInterruptible(name, run); err != nil {
		fmt.Fprintf(os.Stderr, "bench/%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Progress writes a line "bench/<name>: …" to stderr.
func Progress(name, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench/"+name+": "+format+"\n", args...)
}

// Publish prints report and also writes it to path (WriteReport).
func Publish(path, report string) {
	fmt.Print(report)
	WriteReport(path, report)
}
