package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// counters is one scrape of edgefleet_ series: the series as written
// (name and labels) to its value.
type counters map[string]float64

// scrape reads the edgefleet_ series of the metrics endpoint at addr;
// nothing when it does not answer.
func scrape(addr string) counters {
	m := counters{}
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "edgefleet_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// since is what grew from before to c among the series of the counter
// name, as "label value n" items, largest first; label is the label
// shown (the others are summed).
func (c counters) since(before counters, name string, labels ...string) string {
	sums := map[string]float64{}
	for k, v := range c {
		if !strings.HasPrefix(k, name+"{") && k != name {
			continue
		}
		if d := v - before[k]; d > 0 {
			sums[labelValues(k, labels)] += d
		}
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if sums[a] != sums[b] {
			return int(sums[b] - sums[a])
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, sums[k]))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, ", ")
}

// labelValues is the values of labels in the series k, joined by "/"
// ("all" for none).
func labelValues(k string, labels []string) string {
	var vs []string
	for _, l := range labels {
		if _, rest, ok := strings.Cut(k, l+`="`); ok {
			v, _, _ := strings.Cut(rest, `"`)
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return "all"
	}
	return strings.Join(vs, "/")
}

// listenDrops is the kernel's TcpExt ListenDrops counter (SYNs and
// connections dropped because a listen queue was full) of the whole
// network namespace (make bench gives each program one of its own): a
// dropped SYN costs the client a retransmit, 1 s and more.
func listenDrops() int64 {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return 0
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(values) != len(names) {
			continue
		}
		for j, n := range names {
			if n == "ListenDrops" {
				v, _ := strconv.ParseInt(values[j], 10, 64)
				return v
			}
		}
	}
	return 0
}
