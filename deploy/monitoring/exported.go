// Package monitoring is the contract between the binaries' /metrics and
// the Prometheus rules and Grafana dashboard in deploy/prometheus and
// deploy/grafana: the metric families each binary exports, by name and
// type.
//
//	for name, typ := range monitoring.Exported["edge"] { … assert "# TYPE name typ" on the edge's live /metrics … }
//
// Each binary's tests scrape its live /metrics and assert every family
// listed for it here (cmd/edge TestMetricsEndpoint, cmd/origin
// TestMetricsExported, cmd/probe TestMonitorMetrics, cmd/fleet
// TestDNSServeMetrics and TestExporter); this package's tests
// check that every metric a rule or a dashboard panel names is listed here.
// So a metric the rules use is one a running binary was seen to export.
//
// Pending lists the families the docs name whose exporter is being built;
// rules may use them, and the tests say which ones are still pending. When
// an exporter lands, move its names to Exported and assert them in that
// binary's tests.
package monitoring

// Exported maps a binary (the Prometheus job's role: edge, origin; fleet
// runs two: the embedded DNS server and the exporter) to the metric
// families its /metrics serves, with their Prometheus type.
var Exported = map[string]map[string]string{
	"edge": {
		"edgefleet_edge_connections_active":  "gauge",
		"edgefleet_edge_connections_total":   "counter",
		"edgefleet_edge_bytes_total":         "counter",
		"edgefleet_edge_origin_dial_seconds": "histogram",
		"edgefleet_edge_origin_up":           "gauge",
		// Clients refused for a PROXY header of their own.
		"edgefleet_edge_client_proxy_headers_total": "counter",
	},
	"origin": {
		"edgefleet_origin_connections_total":     "counter",
		"edgefleet_origin_spoofed_headers_total": "counter",
		"edgefleet_origin_header_timeouts_total": "counter",
		"edgefleet_origin_connections_active":    "gauge",
		"edgefleet_origin_peer_table_entries":    "gauge",
		"edgefleet_core_operations_total":        "counter",
		"edgefleet_core_backend_up":              "gauge",
		"edgefleet_core_backend_saturation":      "gauge",
		"edgefleet_core_connections_active":      "gauge",
		"edgefleet_core_handshakes_total":        "counter", // by kind and result, every pair from the start
	},
	"fleet": { // fleet dns serve --metrics, the embedded DNS server
		"edgefleet_fleet_dns_updates_total": "counter",
	},
	// fleet watch --metrics (cmd/fleet TestWatchEndToEnd): the end-to-end
	// checks of each published or withdrawn edge and the decisions.
	"fleet-watch": {
		"edgefleet_fleet_edge_healthy":       "gauge",
		"edgefleet_fleet_checks_total":       "counter",
		"edgefleet_fleet_withdrawals_total":  "counter",
		"edgefleet_fleet_restorations_total": "counter",
		"edgefleet_fleet_replacements_total": "counter",
		"edgefleet_fleet_all_edges_failing":  "gauge",
	},
	"probe": { // probe monitor, per resolved address, last measurement
		"edgefleet_probe_edge_up":               "gauge",
		"edgefleet_probe_tcp_connect_seconds":   "gauge",
		"edgefleet_probe_tls_handshake_seconds": "gauge",
		"edgefleet_probe_resolve_up":            "gauge", // per name: did it resolve
	},
	// fleet exporter, job edgefleet-fleet (cmd/fleet TestExporter),
	// labels name and (but for dns_up) family="ipv4"|"ipv6": the
	// addresses the authoritative server answers for name (A, AAAA;
	// absent while it cannot be read), the edges of fleet.yaml with an
	// address of that family, and whether the last read of the server
	// answered.
	"fleet-exporter": {
		"edgefleet_fleet_dns_records":     "gauge",
		"edgefleet_fleet_inventory_edges": "gauge",
		"edgefleet_fleet_dns_up":          "gauge",
		// The sets compared: inventory addresses DNS lacks, DNS
		// addresses no edge has (absent while the server cannot be
		// read), and 1 per such address, labelled address.
		"edgefleet_fleet_dns_missing_records": "gauge",
		"edgefleet_fleet_dns_unknown_records": "gauge",
		"edgefleet_fleet_dns_unknown_address": "gauge",
	},
}

// A PendingMetric is a family the docs name whose exporter is not built
// yet, or that a binary exports only once something happened (a refusal,
// a queued handshake), so an idle binary's /metrics cannot show it.
type PendingMetric struct {
	Binary string // the binary that will export it
	Type   string // its Prometheus type
	Issue  int    // the issue that builds it
}

// Pending lists the families the rules and the dashboard use that an idle
// binary's /metrics does not show.
var Pending = map[string]PendingMetric{
	// Exported by the front (origin/share.go), but only once an edge has
	// been refused: an idle origin's /metrics has no sample of it to
	// assert. cmd/fleet TestStatusRefusedFromOrigin reads it from a real
	// front that refused a real edge.
	"edgefleet_front_edge_refused_total": {Binary: "origin", Type: "counter", Issue: 22},
	// Exported by the core, but only while a full handshake waits for a
	// slot: an idle origin's /metrics has no sample of it to assert.
	"edgefleet_core_handshakes_queued": {Binary: "origin", Type: "gauge", Issue: 22},
}

// PrometheusSeries are the series Prometheus itself makes for every scrape
// target; rules may use them though no binary exports them.
var PrometheusSeries = map[string]bool{"up": true}
