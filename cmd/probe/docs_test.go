package main

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/internal/testbed/stack"
	"github.com/edgefleet/edgefleet/probe"
	"github.com/spf13/cobra"
)

var update = flag.Bool("update", false, "rewrite the generated `probe rank` output in docs/probe.md")

// TestDocExample loads the configuration example of docs/probe.md as the
// binary does: it must load, validate and mean what the page says.
func TestDocExample(t *testing.T) {
	example := testbed.DocBlocks(t, "docs/probe.md", "yaml")[0]
	dir := t.TempDir()
	path := testbed.WriteFile(t, dir, "probe.yaml", example)
	if _, err := testbed.NewPKIIn(dir); err != nil { // ca.pem, agent.pem, agent.key beside the file
		t.Fatal(err)
	}
	cmd := &cobra.Command{}
	cmd.Flags().String("config", "", "")
	cmd.Flags().Set("config", path)
	t.Chdir(dir) // the example names its files relative to where probe runs
	cfg, conf, _, _, err := setup(cmd)
	if err != nil {
		t.Fatalf("docs/probe.md's example does not load: %v", err)
	}
	if cfg.Name != "ldap.example.com" || cfg.Port != 636 || cfg.State != "/var/lib/agent/edges.json" || cfg.Budget != 2*time.Second ||
		cfg.Interval != 5*time.Minute || cfg.Stale != time.Hour || cfg.Streak != 2 || cfg.MinGain != 20*time.Millisecond ||
		cfg.MinGainRatio != 0.25 || conf.ServerName != "ldap.example.com" || len(conf.Certificates) != 1 || cfg.MonitorInterval != 30*time.Second || cfg.Log.Format != "json" {
		t.Errorf("the example loads as %+v", cfg)
	}
}

// TestDocRankOutput: the `probe rank` output docs/probe.md shows is what
// the binary prints for a fleet of a normal edge, an edge 40 ms farther,
// a refused address and a black hole: same shape, same order, same
// errors (the times are those of the run that wrote it; -update reruns
// it and rewrites the page).
func TestDocRankOutput(t *testing.T) {
	bin := buildProbe(t)
	f := stack.NewFleet(t, stack.KindSlow, stack.KindEdge, stack.KindRefused, stack.KindHole)
	dir := t.TempDir()
	state := filepath.Join(dir, "edges.json")
	args := append(append([]string{"rank"}, fleetArgs(f)...), "--budget", "2s", "--state", state)
	table, errOut, code := run(t, bin, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	js, errOut, code := run(t, bin, append(args, "--format", "json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkRankJSON(t, "this run", js, f)
	if *update {
		shown := strings.ReplaceAll(strings.Join(append([]string{"probe"}, args...), " "), f.Origin.PKI.Dir+"/", "")
		shown = strings.ReplaceAll(shown, state, "edges.json")
		shown = strings.Replace(shown, " --budget 1s", "", 1)
		page := testbed.Doc(t, "docs/probe.md")
		page = replaceBlock(t, page, "rank-table", "```sh\n$ "+shown+"\n"+table+"```\n")
		page = replaceBlock(t, page, "rank-json", "```json\n"+js+"```\n")
		if err := os.WriteFile(testbed.DocPath(t, "docs/probe.md"), []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	docJSON := testbed.DocBlocks(t, "docs/probe.md", "json")[0]
	var doc probe.Ranking
	if err := json.Unmarshal([]byte(docJSON), &doc); err != nil {
		t.Fatalf("docs/probe.md's json block: %v", err)
	}
	// The page's addresses and port are those of its run: compare with
	// the page's own fleet layout.
	layout := &stack.Fleet{}
	for _, ip := range doc.Addresses {
		layout.Addrs = append(layout.Addrs, ip+":"+strings.Split(doc.Ranking[0].Addr, ":")[1])
	}
	checkRankJSON(t, "docs/probe.md", docJSON, layout)
	if _, err := probe.ParseState([]byte(docJSON)); err != nil {
		t.Fatalf("docs/probe.md's json block is not a valid state file: %v", err)
	}
	var docTable string
	for _, b := range testbed.DocBlocks(t, "docs/probe.md", "sh") {
		if strings.HasPrefix(b, "$ probe ") && strings.Contains(b, " rank ") {
			_, docTable, _ = strings.Cut(b, "\n") // the output, without the command line
		}
	}
	if shape(docTable) != shape(table) {
		t.Fatalf("docs/probe.md's rank table:\n%s\nhas not the shape of this run's:\n%s", docTable, table)
	}
}

// checkRankJSON: slow edge (first address) second, near edge first,
// refused and black hole last with their errors, the near edge chosen.
func checkRankJSON(t *testing.T, where, js string, f *stack.Fleet) {
	t.Helper()
	var r probe.Ranking
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	slow, near, refused, hole := f.Addrs[0], f.Addrs[1], f.Addrs[2], f.Addrs[3]
	if len(r.Ranking) != 4 || r.Ranking[0].Addr != near || r.Ranking[1].Addr != slow || r.Ranking[2].Addr != refused ||
		r.Ranking[3].Addr != hole || r.Chosen != near || !r.Ranking[0].OK || !r.Ranking[1].OK ||
		!strings.Contains(r.Ranking[2].Error, "connection refused") || !strings.Contains(r.Ranking[3].Error, "no answer within the 2s budget") {
		t.Fatalf("%s: ranking %s", where, js)
	}
}

// shape is a table with every number replaced, and the cause of a
// handshake failure dropped (an edge whose origin is gone closes or
// resets, as the race goes): what must not change.
func shape(s string) string {
	s = regexp.MustCompile(`(?m)(tls handshake [^ ]+): .*$`).ReplaceAllString(s, "$1: …")
	s = regexp.MustCompile(`[0-9]+`).ReplaceAllString(s, "0")
	return regexp.MustCompile(` +`).ReplaceAllString(s, " ")
}

// replaceBlock replaces what lies between <!-- name --> and
// <!-- /name --> in page.
func replaceBlock(t *testing.T, page, name, body string) string {
	t.Helper()
	open, end := "<!-- "+name+" -->\n", "<!-- /"+name+" -->"
	i, j := strings.Index(page, open), strings.Index(page, end)
	if i < 0 || j < i {
		t.Fatalf("docs/probe.md has no %s…%s", open, end)
	}
	return page[:i+len(open)] + body + page[j:]
}

// TestDocMonitorOutput: the `probe monitor --once` table docs/probe.md
// shows has the shape of a run on a working edge and an edge whose origin
// is gone (-update rewrites it).
func TestDocMonitorOutput(t *testing.T) {
	bin := buildProbe(t)
	f := stack.NewFleet(t, stack.KindEdge, stack.KindOrphan)
	args := append(append([]string{"monitor"}, fleetArgs(f)...), "--once")
	out, errOut, code := run(t, bin, args...)
	if code != 1 || !strings.Contains(out, " down ") {
		t.Fatalf("exit %d, %s:\n%s", code, errOut, out)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	checkDocOutput(t, "monitor-table", shownCommand(f, args)+"\n"+out+"# exit status 1, on stderr: "+lines[len(lines)-1]+"\n")
}

// TestDocWatchOutput: `probe watch` after a real failover (the near edge
// stopped while the agent dialed, then back): the ranking in use, then the
// better-edge event, as docs/probe.md shows them (-update rewrites them).
func TestDocWatchOutput(t *testing.T) {
	bin := buildProbe(t)
	f := stack.NewFleet(t, stack.KindEdge, stack.KindSlow)
	near, far := f.Addrs[0], f.Addrs[1]
	state := filepath.Join(t.TempDir(), "edges.json")
	cfg := probe.DefaultConfig()
	cfg.Name, cfg.Port, cfg.State = testbed.ServerName, f.Port, state
	d := &probe.Dialer{Config: cfg, TLS: f.Origin.AgentTLS(), Resolver: probe.DNSResolver(f.Named.Addr)}
	if r := d.Rank(context.Background()); r.Chosen != near {
		t.Fatalf("ranked %+v, want %s chosen", r, near)
	}
	f.Edges[near].Stop()
	c, err := d.DialContext(context.Background())
	if err != nil || c.RemoteAddr().String() != far {
		t.Fatalf("failover: %v %v", c, err)
	}
	c.Close()
	f.RestartEdge(t, near)

	args := append(append([]string{"watch"}, fleetArgs(f)...), "--state", state, "--interval", "1s")
	cmd := exec.Command(bin, args...)
	var out, logs testbed.Buffer
	cmd.Stdout, cmd.Stderr = &out, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), probe.ReasonBetterEdge); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no event after 30 s:\n%s\n%s", out.String(), logs.String())
		}
	}
	shown := shownCommand(f, args)
	shown = strings.ReplaceAll(shown, state, "edges.json")
	checkDocOutput(t, "watch-output", shown+"\n"+out.String())
}

// shownCommand is args as the page shows them: "$ probe …", the PKI's
// files by their base names, the fleet's 1 s test budget left out.
func shownCommand(f *stack.Fleet, args []string) string {
	s := strings.ReplaceAll(strings.Join(append([]string{"$ probe"}, args...), " "), f.Origin.PKI.Dir+"/", "")
	return strings.Replace(s, " --budget 1s", "", 1)
}

// checkDocOutput compares the page's block name with got by shape (the
// numbers are those of the run that wrote the page), or rewrites it with
// -update.
func checkDocOutput(t *testing.T, name, got string) {
	t.Helper()
	page := testbed.Doc(t, "docs/probe.md")
	if *update {
		page = replaceBlock(t, page, name, "```sh\n"+got+"```\n")
		if err := os.WriteFile(testbed.DocPath(t, "docs/probe.md"), []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	open := "<!-- " + name + " -->\n```sh\n"
	i, j := strings.Index(page, open), strings.Index(page, "```\n<!-- /"+name+" -->")
	if i < 0 || j < i {
		t.Fatalf("docs/probe.md has no generated %s block", name)
	}
	doc := page[i+len(open) : j]
	_, docOut, _ := strings.Cut(doc, "\n")
	_, gotOut, _ := strings.Cut(got, "\n")
	if shape(docOut) != shape(gotOut) {
		t.Fatalf("docs/probe.md's %s:\n%s\nhas not the shape of this run's:\n%s", name, doc, got)
	}
}

// TestDocDefaults: every key and default docs/probe.md's table states is
// the binary's.
func TestDocDefaults(t *testing.T) {
	testbed.CheckDocDefaults(t, "docs/probe.md", "", cli.Defaults(defaults()))
}
