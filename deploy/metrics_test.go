package deploy

import (
	"bufio"
	"strings"
	"testing"
)

func TestParseGauge(t *testing.T) {
	for _, tc := range []struct {
		text string
		n    int
		ok   bool
	}{
		{"# HELP edgefleet_edge_connections_active open relayed connections\n# TYPE edgefleet_edge_connections_active gauge\nedgefleet_edge_connections_active 3\n", 3, true},
		{"edgefleet_edge_connections_active_total 9\nedgefleet_edge_connections_active{} 2\n", 2, true},
		{"edgefleet_edge_connections_total{result=\"eof\"} 4\n", 0, false},
		{"edgefleet_edge_connections_active 1e+00\n", 1, true},
	} {
		n, ok, err := parseGauge(bufio.NewScanner(strings.NewReader(tc.text)), ActiveConnsMetric)
		if err != nil || n != tc.n || ok != tc.ok {
			t.Errorf("%q: %d %v %v, want %d %v", tc.text, n, ok, err, tc.n, tc.ok)
		}
	}
	if _, _, err := parseGauge(bufio.NewScanner(strings.NewReader("edgefleet_edge_connections_active x\n")), ActiveConnsMetric); err == nil {
		t.Error("a bad value parsed")
	}
	if MetricsURL("10.0.0.1:9101") != "http://10.0.0.1:9101/metrics" || MetricsURL("https://e/m") != "https://e/m" {
		t.Error("MetricsURL")
	}
}
