package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// docs/architecture.md: duration is a number of seconds in JSON and a Go
// duration in text, in groups too.
func TestLoggerDuration(t *testing.T) {
	var b bytes.Buffer
	Logger(Log{Format: "json", Level: "info"}, &b).Info("ldap op", "duration", 1500*time.Millisecond,
		"count", 3, "conn", map[string]any{"x": 1})
	Logger(Log{Format: "json", Level: "info"}, &b).WithGroup("g").Info("nested", "duration", 250*time.Microsecond)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	var top struct {
		Duration any `json:"duration"`
		Count    any `json:"count"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &top); err != nil {
		t.Fatal(err)
	}
	if top.Duration != 1.5 || top.Count != 3.0 {
		t.Errorf("json line %s: duration %v (%T), want the number 1.5", lines[0], top.Duration, top.Duration)
	}
	var nested struct {
		G struct {
			Duration any `json:"duration"`
		} `json:"g"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &nested); err != nil || nested.G.Duration != 0.00025 {
		t.Errorf("json line in a group %s: duration %v, want 0.00025", lines[1], nested.G.Duration)
	}
	b.Reset()
	Logger(Log{Format: "text", Level: "info"}, &b).Info("ldap op", "duration", 1500*time.Millisecond)
	if !strings.Contains(b.String(), " duration=1.5s") {
		t.Errorf("text line %q: want duration=1.5s", b.String())
	}
}
