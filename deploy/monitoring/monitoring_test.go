package monitoring_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/deploy/monitoring"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

const (
	rulesFile     = "../prometheus/alerts.yml"
	rulesTestFile = "../prometheus/alerts_test.yml"
	dashboardFile = "../grafana/edgefleet.json"
)

// promtool runs promtool in dir and fails the test with its output when it
// fails.
func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	testbed.Need(t, "promtool")
	cmd := exec.Command("promtool", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// decodeFile decodes the file at path into v with unmarshal (YAML or JSON).
func decodeFile(t *testing.T, path string, unmarshal func([]byte, any) error, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	var f ruleFile
	decodeFile(t, rulesFile, yaml.Unmarshal, &f)
	return f
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name, Type, Query string
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	decodeFile(t, dashboardFile, json.Unmarshal, &d)
	return d
}

// grafanaVars are the dashboard variables a panel query may use, with a
// value that makes the query plain PromQL for promtool and the parser.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$__range", "1h",
)

// panelExpr is one dashboard query, as PromQL.
type panelExpr struct {
	where, expr string
}

// dashboardExprs checks the dashboard's shape (unique panel ids, a grid
// position, the datasource variable on every query panel) and returns its
// queries with the Grafana variables replaced.
func dashboardExprs(t *testing.T, d dashboard) []panelExpr {
	t.Helper()
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard has no uid or title")
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct{ Name, Type, Query string }) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Errorf("dashboard has no datasource variable of type prometheus")
	}
	var out []panelExpr
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if p.ID == 0 || ids[p.ID] {
				t.Errorf("%s: missing or repeated id", where)
			}
			ids[p.ID] = true
			if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
				t.Errorf("%s: no gridPos", where)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: datasource is not the ${datasource} variable", where)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no query", where)
			}
			for _, tg := range p.Targets {
				expr := grafanaVars.Replace(tg.Expr)
				if strings.Contains(expr, "$") {
					t.Errorf("%s query %s: unknown variable in %q", where, tg.RefID, tg.Expr)
				}
				out = append(out, panelExpr{fmt.Sprintf("%s query %s", where, tg.RefID), expr})
			}
		}
	}
	walk(d.Panels)
	return out
}

// TestRulesCheck: promtool parses and checks every rule.
func TestRulesCheck(t *testing.T) {
	out := promtool(t, ".", "check", "rules", rulesFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules:\n%s", out)
	}
}

// TestRulesUnit runs promtool's unit tests of the rules, and checks that
// they cover every alert both firing and not firing.
func TestRulesUnit(t *testing.T) {
	promtool(t, filepath.Dir(rulesTestFile), "test", "rules", filepath.Base(rulesTestFile))

	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	decodeFile(t, rulesTestFile, yaml.Unmarshal, &tests)
	firing, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !firing[r.Alert] {
				t.Errorf("%s: no test where it fires", r.Alert)
			}
			if !silent[r.Alert] {
				t.Errorf("%s: no test where it stays silent", r.Alert)
			}
		}
	}
}

// TestDashboardExprs: every dashboard query is PromQL that promtool
// accepts, checked as recording rules of a generated rule file.
func TestDashboardExprs(t *testing.T) {
	exprs := dashboardExprs(t, readDashboard(t))
	var f strings.Builder
	f.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(e.expr) // a JSON string is a YAML string
		fmt.Fprintf(&f, "      - record: dashboard:query_%d\n        expr: %s\n", i, q)
	}
	path := testbed.WriteFile(t, t.TempDir(), "dashboard-rules.yml", f.String())
	out := promtool(t, ".", "check", "rules", path)
	if !strings.Contains(out, fmt.Sprintf("SUCCESS: %d rules found", len(exprs))) {
		t.Fatalf("promtool check rules on the dashboard's %d queries:\n%s", len(exprs), out)
	}
}

// known returns every family a binary was seen to export, and the
// pending ones, by name, with their type.
func known() (exported, pending map[string]string) {
	exported, pending = map[string]string{}, map[string]string{}
	for _, names := range monitoring.Exported {
		for n, typ := range names {
			exported[n] = typ
		}
	}
	for n, p := range monitoring.Pending {
		pending[n] = p.Type
	}
	return exported, pending
}

// family resolves a series name to its metric family and type: a
// histogram's _bucket, _sum and _count series belong to it.
func family(name string, types map[string]string) (string, string, bool) {
	if typ, ok := types[name]; ok {
		return name, typ, typ != "histogram" // a histogram is queried by its series
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if ok && types[base] == "histogram" {
			return base, "counter", true
		}
	}
	return "", "", false
}

// TestMetricNames: every metric a rule or a panel names is one the binaries
// export (each binary's tests assert its list against its live /metrics),
// a pending one the docs name, a series Prometheus makes itself, or a
// recording rule of alerts.yml; rate() and increase() are taken of
// counters only; and the dashboard shows every exported family.
func TestMetricNames(t *testing.T) {
	exported, pending := known()
	types := map[string]string{}
	for n, typ := range exported {
		types[n] = typ
	}
	for n, typ := range pending {
		types[n] = typ
	}
	recorded := map[string]bool{}
	var exprs []panelExpr
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
			exprs = append(exprs, panelExpr{fmt.Sprintf("rule %s%s", r.Record, r.Alert), r.Expr})
		}
	}
	exprs = append(exprs, dashboardExprs(t, readDashboard(t))...)

	p := parser.NewParser(parser.Options{})
	used, usedPending := map[string]bool{}, map[string]bool{}
	for _, e := range exprs {
		ast, err := p.ParseExpr(e.expr)
		if err != nil {
			t.Errorf("%s: %v", e.where, err)
			continue
		}
		check := func(name string, counterOnly bool) {
			if name == "" {
				t.Errorf("%s: a selector without a metric name in %q", e.where, e.expr)
				return
			}
			if monitoring.PrometheusSeries[name] || recorded[name] {
				return
			}
			fam, typ, ok := family(name, types)
			switch {
			case !ok:
				t.Errorf("%s: %s is not a metric the binaries export (deploy/monitoring.Exported) nor a pending one", e.where, name)
				return
			case counterOnly && typ != "counter":
				t.Errorf("%s: rate or increase of %s, a %s", e.where, name, typ)
			}
			if _, ok := pending[fam]; ok {
				usedPending[fam] = true
			} else {
				used[fam] = true
			}
		}
		counters := map[*parser.VectorSelector]bool{}
		parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
			switch n := n.(type) {
			case *parser.Call:
				if slices.Contains([]string{"rate", "irate", "increase"}, n.Func.Name) {
					if m, ok := n.Args[0].(*parser.MatrixSelector); ok {
						counters[m.VectorSelector.(*parser.VectorSelector)] = true
					}
				}
			case *parser.VectorSelector:
				check(n.Name, counters[n])
			}
			return nil
		})
	}
	var missing []string
	for n := range exported {
		if !used[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("exported but in no rule or panel: %v", missing)
	}
	for n := range usedPending {
		p := monitoring.Pending[n]
		t.Logf("pending: %s (%s, issue %d) is used; an idle binary does not export it", n, p.Binary, p.Issue)
	}
}

// TestExportedAndPending: a family is either exported or pending, spelled
// as Prometheus names are, with a known type.
func TestExportedAndPending(t *testing.T) {
	name := regexp.MustCompile(`^edgefleet_(edge|origin|front|core|probe|fleet)_[a-z0-9_]+$`)
	types := []string{"counter", "gauge", "histogram"}
	exported, _ := known()
	for n, p := range monitoring.Pending {
		if _, ok := exported[n]; ok {
			t.Errorf("%s is both exported and pending: drop it from Pending", n)
		}
		if !name.MatchString(n) || !slices.Contains(types, p.Type) || p.Binary == "" || p.Issue == 0 {
			t.Errorf("pending %s: %+v", n, p)
		}
	}
	for n, typ := range exported {
		if !name.MatchString(n) || !slices.Contains(types, typ) {
			t.Errorf("exported %s: %s", n, typ)
		}
		if strings.HasSuffix(n, "_total") != (typ == "counter") {
			t.Errorf("%s is a %s: only counters end in _total", n, typ)
		}
	}
}

// TestDocExample: the scrape configuration docs/monitoring.md shows is one
// promtool accepts, with alerts.yml beside it.
func TestDocExample(t *testing.T) {
	dir := t.TempDir()
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	testbed.WriteFile(t, dir, "alerts.yml", string(rules))
	testbed.WriteFile(t, dir, "prometheus.yml", testbed.DocBlocks(t, "docs/monitoring.md", "yaml")[0])
	out := promtool(t, dir, "check", "config", "prometheus.yml")
	if !strings.Contains(out, "SUCCESS: 1 rule files found") {
		t.Fatalf("promtool check config:\n%s", out)
	}
}
