package deploy

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ActiveConnsMetric is the edge's gauge of open relayed connections.
const ActiveConnsMetric = "edgefleet_edge_connections_active"

// MetricsURL is the scrape URL of an edges[].metrics value: a URL as is,
// host:port as http://host:port/metrics.
func MetricsURL(endpoint string) string {
	if strings.HasPrefix(endpoint, "http://") || strings.HasPrefix(endpoint, "https://") {
		return endpoint
	}
	return "http://" + endpoint + "/metrics"
}

// ScrapeConns reads edgefleet_edge_connections_active from an edge's
// Prometheus endpoint (text exposition format).
func ScrapeConns(ctx context.Context, endpoint string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	url := MetricsURL(endpoint)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, fmt.Errorf("metrics %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("metrics %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics %s: %s", url, resp.Status)
	}
	n, ok, err := parseGauge(bufio.NewScanner(resp.Body), ActiveConnsMetric)
	if err != nil {
		return 0, fmt.Errorf("metrics %s: %w", url, err)
	}
	if !ok {
		return 0, fmt.Errorf("metrics %s: no %s (is it an edge?)", url, ActiveConnsMetric)
	}
	return n, nil
}

// parseGauge finds an unlabelled sample of name.
func parseGauge(sc *bufio.Scanner, name string) (int, bool, error) {
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if rest[0] == '{' {
			_, rest, _ = strings.Cut(rest, "}")
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s: bad value %q", name, fields[0])
		}
		return int(v), true, nil
	}
	return 0, false, sc.Err()
}
