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

// Verdicts is the table of the relay targets (docs/architecture.md) for ours against
// HAProxy's figures from the same run.
func Verdicts(name string, ours, hap Relay) string {
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
	fmt.Fprintf(&b, "\n| %s vs HAProxy | ours | HAProxy | ratio | target ([architecture](architecture.md#performance-targets)) | met |\n|---|---:|---:|---:|---|---|\n", name)
	fmt.Fprintf(&b, "| throughput MiB/s | %.0f | %.0f | %.2f× | ≥ 1.5× | %s |\n", ours.Throughput/(1<<20), hap.Throughput/(1<<20), tp, yes(tp >= 1.5))
	fmt.Fprintf(&b, "| short connections/s | %.0f | %.0f | %.2f× | ≥ 1.2× | %s |\n", ours.Rate, hap.Rate, cr, yes(cr >= 1.2))
	fmt.Fprintf(&b, "| CPU µs per short connection | %.0f | %.0f | %.2f× | ≤ 1.0× | %s |\n", ours.CPUPerConn, hap.CPUPerConn, cpu, yes(cpu > 0 && cpu <= 1))
	fmt.Fprintf(&b, "| p99 of a short connection | %v | %v | %.2f× | ≤ 1.0× | %s |\n", ours.P99.Round(time.Microsecond), hap.P99.Round(time.Microsecond),
		ratio(float64(ours.P99), float64(hap.P99)), yes(ours.P99 <= hap.P99))
	if ours.IdleOK {
		fmt.Fprintf(&b, "| idle RSS KiB per connection | %.2f | %.2f | | ≤ 3 KiB | %s |\n", ours.RSSPerConn, hap.RSSPerConn, yes(ours.RSSPerConn <= 3))
		fmt.Fprintf(&b, "| idle fds per connection | %.3f | %.3f | | ≤ 2 | %s |\n", ours.FDsPerConn, hap.FDsPerConn, yes(ours.FDsPerConn <= 2))
	}
	return b.String()
}

// Main parses the flags and runs a benchmark program; an error is one
// line "bench/<name>: <err>" and exit status 1.
func Main(name string, run func() error) {
	flag.Parse()
	if err := run(); err != nil {
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
