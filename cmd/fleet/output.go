package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/edgefleet/edgefleet/deploy"
)

// checkOutput refuses an --output other than text and json.
func checkOutput(output string) error {
	switch output {
	case "text", "json":
		return nil
	}
	return fmt.Errorf("--output %q: want text or json", output)
}

// printJSON writes v indented, as every --output json does.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// stepLines is the converger's Out under --output json: each progress
// line is kept for the report and copied to echo (stderr), so the
// operator still sees the run while stdout carries one JSON object. An
// indented line continues the step before it (a dry run's firewall step
// and its rule-level diff) and is kept in the same string.
type stepLines struct {
	echo io.Writer

	mu    sync.Mutex
	buf   bytes.Buffer
	lines []string
}

func (s *stepLines) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	for {
		line, err := s.buf.ReadString('\n')
		if err != nil {
			s.buf.WriteString(line) // an unfinished line waits for the rest
			break
		}
		line = strings.TrimSuffix(line, "\n")
		if n := len(s.lines); n > 0 && strings.HasPrefix(line, " ") {
			s.lines[n-1] += "\n" + line
			continue
		}
		s.lines = append(s.lines, line)
	}
	return s.echo.Write(p)
}

// applyJSON is `fleet apply --output json` (docs/dns-deploy.md), written
// once the run ends, converged or not.
type applyJSON struct {
	Name      string     `json:"name"`
	DryRun    bool       `json:"dry_run"`
	Converged bool       `json:"converged"`
	Error     string     `json:"error,omitempty"`
	Edges     []string   `json:"edges"` // the inventory's, in its order
	DNS       *rrsetJSON `json:"dns"`   // the set read back after the run; null when not read
	Steps     []string   `json:"steps"` // the steps' lines, as the text output prints them
}

// reportApply writes the JSON report of a run that ended with err.
func reportApply(ctx context.Context, w io.Writer, steps *stepLines, pub deploy.DNSClient, cfg deploy.Config, dryRun bool, err error) error {
	steps.mu.Lock()
	lines := append([]string{}, steps.lines...)
	steps.mu.Unlock()
	r := applyJSON{Name: strings.TrimSuffix(cfg.Name, "."), DryRun: dryRun, Converged: err == nil && !dryRun, Edges: []string{}, Steps: lines}
	if err != nil {
		r.Error = err.Error()
	}
	for _, e := range cfg.Edges {
		r.Edges = append(r.Edges, e.Name)
	}
	if set, rerr := pub.Read(ctx); rerr == nil {
		j := rrsetJSONOf(set)
		r.DNS = &j
	}
	return printJSON(w, r)
}
