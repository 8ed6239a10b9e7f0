package benchkit

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"
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
