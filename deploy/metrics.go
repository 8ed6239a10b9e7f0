package deploy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/internal/safefile"
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
	return scrapeConns(ctx, endpoint, "")
}

// Scrape is how fleet reads an edge's active connections: ScrapeConns
// with the bearer token of deploy.metrics_token_file, when set (the
// edge's metrics_token_file holds the same token).
func (d Deploy) Scrape() func(ctx context.Context, endpoint string) (int, error) {
	return func(ctx context.Context, endpoint string) (int, error) {
		token := ""
		if d.MetricsTokenFile != "" {
			var err error
			if token, err = safefile.Token(d.MetricsTokenFile); err != nil {
				return 0, fmt.Errorf("deploy.metrics_token_file: %w", err)
			}
		}
		return scrapeConns(ctx, endpoint, token)
	}
}

func scrapeConns(ctx context.Context, endpoint, token string) (int, error) {
	var n int
	err := getMetrics(ctx, endpoint, token, func(body io.Reader) error {
		v, ok, err := parseGauge(bufio.NewScanner(body), ActiveConnsMetric)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("no %s (is it an edge?)", ActiveConnsMetric)
		}
		n = v
		return nil
	})
	return n, err
}

// getMetrics GETs endpoint's metrics (MetricsURL), with token as a bearer
// token when not empty, and hands read the body: at most maxMetricsBody
// bytes, a longer one is an error. Errors name the URL; the exchange is
// bounded by 3 s.
func getMetrics(ctx context.Context, endpoint, token string, read func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	url := MetricsURL(endpoint)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("metrics %s: %w", url, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("metrics %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("metrics %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetricsBody+1))
	if err != nil {
		return fmt.Errorf("metrics %s: %w", url, err)
	}
	if len(body) > maxMetricsBody {
		return fmt.Errorf("metrics %s: the answer is longer than %d bytes", url, maxMetricsBody)
	}
	if err := read(bytes.NewReader(body)); err != nil {
		return fmt.Errorf("metrics %s: %w", url, err)
	}
	return nil
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
