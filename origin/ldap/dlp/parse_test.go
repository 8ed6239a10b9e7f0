package dlp_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
)

// Every testdata/invalid-*.json file, with the exact message of every
// problem it holds.
var invalidFiles = map[string][]string{
	"invalid-syntax.json": {
		`invalid-syntax.json:3:3: syntax error: unexpected '{', expected ',' or ']' in an array`,
	},
	"invalid-trailing-comma.json": {
		`invalid-trailing-comma.json:3:78: syntax error: trailing comma before '}'`,
	},
	"invalid-unterminated-comment.json": {
		`invalid-unterminated-comment.json:2:28: syntax error: unterminated /* comment`,
	},
	"invalid-not-array.json": {
		`invalid-not-array.json:2:1: the file must be a JSON array of objects, found an object`,
	},
	"invalid-utf8.json": {
		`invalid-utf8.json:2:93: syntax error: invalid UTF-8; a Latin-1 file needs "JSONCodeSet": 0 in its Defaults object`,
	},
	"invalid-objects.json": {
		`invalid-objects.json:2:3: element 1 of the array must be an object, found a string`,
		`invalid-objects.json:3:3: object without an "object" key (want one of Defaults, LdapServer, LdapProxy, ProxyRule, LoadBalancer)`,
		`invalid-objects.json:4:5: unknown object type "LdapSrv" (want one of Defaults, LdapServer, LdapProxy, ProxyRule, LoadBalancer)`,
		`invalid-objects.json:5:5: unknown object type 7 (want one of Defaults, LdapServer, LdapProxy, ProxyRule, LoadBalancer)`,
	},
	// Line 3 starts with a comment holding a non-ASCII character: columns
	// count characters and comments do not shift them.
	"invalid-keys.json": {
		`invalid-keys.json:2:27: Defaults key "ConnectTimeOut": unknown key (did you mean "ConnectTimeout"?)`,
		`invalid-keys.json:2:48: Defaults key "Retry": unknown key`,
		`invalid-keys.json:3:81: LdapServer "LDAP1" key "Port": unknown key (did you mean "port"?)`,
		`invalid-keys.json:3:94: LdapServer "LDAP1" key "host": duplicate key`,
	},
	"invalid-defaults.json": {
		`invalid-defaults.json:4:5: Defaults key "ConnectTimeout": must be greater than 0 (0 would leave the core unable to connect)`,
		`invalid-defaults.json:5:5: Defaults key "OfflineRetryTimeout": must be 0..86400 seconds, found -1`,
		`invalid-defaults.json:6:5: Defaults key "MonitorInterval": must be a number, found "10"`,
		`invalid-defaults.json:7:5: Defaults key "JSONCodeSet": must be an integer 0..1, found 2`,
		`invalid-defaults.json:8:5: Defaults key "Tracing": must be an integer 0..3, found 1.5`,
		`invalid-defaults.json:10:3: Defaults: duplicate Defaults object (first on line 2)`,
	},
	"invalid-servers.json": {
		`invalid-servers.json:2:59: LdapServer "LDAP1" key "port": must be an integer 1..65535, found 70000`,
		`invalid-servers.json:3:59: LdapServer "LDAP2" key "port": must be a number, found "389"`,
		`invalid-servers.json:3:74: LdapServer "LDAP2" key "ssl": must be 0 or 1, found 2`,
		`invalid-servers.json:4:3: LdapServer "LDAP3": missing key "host"`,
		`invalid-servers.json:5:29: LdapServer "LDAP1" key "name": duplicate LdapServer name (first defined on line 2)`,
		`invalid-servers.json:6:29: LdapServer "LDAP 4" key "name": must not contain parentheses, commas or spaces (it is used in actions and rule lists)`,
		`invalid-servers.json:7:3: LdapServer: missing key "name"`,
		`invalid-servers.json:8:29: LdapServer key "name": must be a non-empty string`,
		`invalid-servers.json:9:46: LdapServer "LDAP5" key "host": must be a host name or an IP address, found "bad host"`,
	},
	"invalid-rules.json": {
		`invalid-rules.json:4:28: ProxyRule "R1" key "ruleType": must be "UserRouting" or "OperationRouting", found "UserRoute"`,
		`invalid-rules.json:6:5: ProxyRule "R2" key "condition": at character 7: invalid DN "admin": at character 6: missing '=' after "admin"`,
		`invalid-rules.json:7:17: ProxyRule "R2" key "actions": no LdapServer named "LDAP9"`,
		`invalid-rules.json:7:17: ProxyRule "R2" key "actions": server "LDAP1" is listed twice`,
		`invalid-rules.json:8:69: ProxyRule "R3" key "condition": at character 31: missing ')' at the end of the condition`,
		`invalid-rules.json:9:17: ProxyRule "R3" key "actions": no LoadBalancer named "LB9"`,
		`invalid-rules.json:9:34: ProxyRule "R3" key "keepconn": applies to OperationRouting rules only`,
		`invalid-rules.json:9:49: ProxyRule "R3" key "loadbalance": must be 0 or 1, found "yes"`,
		`invalid-rules.json:11:16: ProxyRule "R4" key "actions": must be an array with one action, "forwardto(S1,S2,…)" or "balance(LB)"`,
		`invalid-rules.json:13:17: ProxyRule "R5" key "actions": unknown action "sendto" (want "forwardto(S1,S2,…)" or "balance(LB)")`,
		`invalid-rules.json:13:35: ProxyRule "R5" key "failover": must be 0 or 1, found 2`,
		`invalid-rules.json:14:3: ProxyRule "R6": missing key "condition"`,
		`invalid-rules.json:15:16: ProxyRule "R6" key "actions": must be an array with one action, "forwardto(S1,S2,…)" or "balance(LB)"`,
		`invalid-rules.json:16:3: ProxyRule "R7": missing key "actions"`,
		`invalid-rules.json:16:69: ProxyRule "R7" key "condition": at character 2: item "user:regex=([a-z)" is not closed by ')'`,
		`invalid-rules.json:17:106: ProxyRule "R8" key "actions": empty server name in "forwardto()"`,
	},
	"invalid-proxy.json": {
		`invalid-proxy.json:4:73: LdapProxy "ldapConfiguration" key "rules": no ProxyRule named "R2"`,
		`invalid-proxy.json:4:79: LdapProxy "ldapConfiguration" key "rules": "R1" is listed twice`,
		`invalid-proxy.json:4:107: LdapProxy "ldapConfiguration" key "default": no LdapServer named "LDAP2"`,
		`invalid-proxy.json:4:116: LdapProxy "ldapConfiguration" key "default": must be an array of LdapServer names, found 3`,
		`invalid-proxy.json:5:54: LdapProxy "other" key "rules": must be an array of ProxyRule names, found a string`,
		`invalid-proxy.json:5:71: LdapProxy "other" key "default": must be an array of LdapServer names, found an object`,
		`invalid-proxy.json:6:28: LdapProxy "ldapConfiguration" key "name": duplicate LdapProxy name (first defined on line 4)`,
	},
	"invalid-loadbalancer.json": {
		`invalid-loadbalancer.json:3:46: LoadBalancer "LB1" key "algorithm": unknown algorithm "random" (want one of failover, optimal, proportional, saturation, searchfilter)`,
		`invalid-loadbalancer.json:4:3: LoadBalancer "LB2": missing key "algorithm"`,
		`invalid-loadbalancer.json:4:46: LoadBalancer "LB2" key "routes": must list at least one route`,
		`invalid-loadbalancer.json:4:60: LoadBalancer "LB2" key "weights": unknown key`,
		`invalid-loadbalancer.json:5:103: LoadBalancer "LB3" key "precision": applies to the optimal algorithm only`,
		`invalid-loadbalancer.json:6:50: LoadBalancer "LB3" key "routes[1].weight": applies to the proportional algorithm only`,
		`invalid-loadbalancer.json:7:29: LoadBalancer "LB3" key "routes[2].server": no LdapServer named "L2"`,
		`invalid-loadbalancer.json:7:70: LoadBalancer "LB3" key "routes[2].priority.default": must be an integer 1..1000000, found 0`,
		`invalid-loadbalancer.json:9:72: LoadBalancer "LB4" key "routes[1].prohibited": "uid" is both allowed and prohibited`,
		`invalid-loadbalancer.json:9:97: LoadBalancer "LB4" key "routes[1].capacity": capacity 8 differs from the 64 LoadBalancer "LB1" gives L1 on line 3: a server has one capacity`,
	},
	// A Latin-1 file: the name "Rä" comes out in UTF-8 and columns count
	// characters (one per byte).
	"invalid-latin1.json": {
		`invalid-latin1.json:4:120: ProxyRule "Rä" key "actions": no LdapServer named "LDAP2"`,
	},
}

func TestInvalidFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid-*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			want, ok := invalidFiles[name]
			if !ok {
				t.Fatalf("no expected errors listed for %s", name)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := dlp.Parse(name, data)
			if f != nil || err == nil {
				t.Fatalf("accepted: %+v", f)
			}
			var list dlp.ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, not an ErrorList", err)
			}
			if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
				t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
			}
			if len(list) != len(want) {
				t.Errorf("%d errors in the list, %d lines expected", len(list), len(want))
			}
		})
	}
	for name := range invalidFiles {
		if _, err := os.Stat(filepath.Join("testdata", name)); err != nil {
			t.Errorf("expected errors listed for missing file %s", name)
		}
	}
}

// TestDocExample parses the complete example of docs/dlp-file.md.
func TestDocExample(t *testing.T) {
	example := testbed.DocBlocks(t, "docs/dlp-file.md", "jsonc")[0]
	f, err := dlp.Parse("ldap_proxy.json", []byte(example))
	if err != nil {
		t.Fatalf("the documented example does not parse:\n%v", err)
	}
	want := dlp.Defaults{ConnectTimeout: 3 * time.Second, OfflineRetryTimeout: 60 * time.Second, MonitorInterval: 10 * time.Second, JSONCodeSet: 1}
	if f.Defaults != want {
		t.Errorf("defaults %+v", f.Defaults)
	}
	if !slices.Equal(f.ServerOrder, []string{"LDAP1", "LDAP2", "LDAP3", "MASTER"}) {
		t.Errorf("servers %v", f.ServerOrder)
	}
	if s := f.Servers["LDAP2"]; s.Port != 389 || s.SSL || s.Addr() != "ldap2.example.net:389" {
		t.Errorf("LDAP2 %+v", s)
	}
	if s := f.Servers["LDAP3"]; !s.SSL || s.Addr() != "10.0.0.3:636" {
		t.Errorf("LDAP3 %+v", s)
	}
	if s := f.Servers["MASTER"]; s.Addr() != "[2001:db8::10]:389" {
		t.Errorf("MASTER %s", s.Addr())
	}
	p := f.Proxy("ldapConfiguration")
	if p == nil {
		t.Fatal("no LdapProxy ldapConfiguration")
	}
	var names []string
	for _, r := range p.Rules {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"WRITES", "REPORTS", "ADMIN", "STAFF", "ANONYMOUS"}) || !slices.Equal(p.Default, []string{"LDAP1", "LDAP2"}) {
		t.Errorf("proxy rules %v default %v", names, p.Default)
	}
	rules := []struct {
		name, typ    string
		forward      []string
		balance      string
		lb, fo, keep bool
	}{
		{"ADMIN", dlp.UserRouting, []string{"LDAP3", "LDAP1"}, "", false, true, false},
		{"STAFF", dlp.UserRouting, []string{"LDAP1", "LDAP2", "LDAP3"}, "", true, true, false},
		{"ANONYMOUS", dlp.UserRouting, []string{"LDAP2"}, "", true, false, false},
		{"WRITES", dlp.OperationRouting, []string{"MASTER", "LDAP1"}, "", false, true, false},
		{"REPORTS", dlp.OperationRouting, nil, "LB1", false, true, false},
	}
	for _, w := range rules {
		r := f.Rules[w.name]
		if r.Type != w.typ || !slices.Equal(r.Forward, w.forward) || r.Balance != w.balance || r.LoadBalance != w.lb || r.Failover != w.fo || r.KeepConn != w.keep {
			t.Errorf("rule %s = %+v", w.name, r)
		}
	}
	if lb := f.Balancers["LB1"]; lb.Algorithm != "proportional" || len(lb.Routes) != 2 || lb.Routes[1].WeightFor("search") != 3 {
		t.Errorf("LB1 %+v", lb)
	}
}

// A file with no Defaults gets the documented defaults; rules default to
// every rule in file order; loadbalance defaults by rule kind.
func TestDefaults(t *testing.T) {
	f, err := dlp.Parse("x.json", []byte(`[
  { "object": "LdapServer", "name": "S", "host": "h" },
  { "object": "LdapProxy", "name": "p" },
  { "object": "ProxyRule", "ruleType": "OperationRouting", "name": "op", "condition": "(opr.req.typ=add)", "actions": ["forwardto(S)"] },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "exact", "condition": "(user=cn=a,o=b)", "actions": ["forwardto(S)"] },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "exact-in-and", "condition": "(&(user=cn=a,o=b))", "actions": ["forwardto(S)"] },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "node", "condition": "(user:node=o=b)", "actions": ["forwardto(S)"] },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "any", "condition": "(user=*)", "actions": ["forwardto(S)"] },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "anon", "condition": "(user=anonymous)", "actions": ["forwardto(S)"] },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "forced", "condition": "(user=cn=a,o=b)", "actions": ["forwardto(S)"], "loadbalance": true }
]`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Defaults != dlp.DefaultDefaults() || f.Defaults.ConnectTimeout != 3*time.Second || f.Defaults.OfflineRetryTimeout != time.Minute {
		t.Errorf("defaults %+v", f.Defaults)
	}
	if f.Servers["S"].Port != 389 {
		t.Errorf("port %d", f.Servers["S"].Port)
	}
	var order []string
	for _, r := range f.Proxy("p").Rules {
		order = append(order, r.Name)
	}
	if !slices.Equal(order, f.RuleOrder) || len(order) != 7 || len(f.Proxy("p").Default) != 0 {
		t.Errorf("rules %v (file order %v)", order, f.RuleOrder)
	}
	for name, lb := range map[string]bool{"op": false, "exact": false, "exact-in-and": true, "node": true, "any": true, "anon": true, "forced": true} {
		if r := f.Rules[name]; r.LoadBalance != lb || !r.Failover || r.KeepConn {
			t.Errorf("rule %s: loadbalance %v failover %v keepconn %v", name, r.LoadBalance, r.Failover, r.KeepConn)
		}
	}
	// Fractions of a second and 0 for OfflineRetryTimeout are allowed.
	f, err = dlp.Parse("y.json", []byte(`[{"object":"Defaults","ConnectTimeout":0.25,"OfflineRetryTimeout":0,"MonitorInterval":1,"Tracing":3}]`))
	if err != nil || f.Defaults.ConnectTimeout != 250*time.Millisecond || f.Defaults.OfflineRetryTimeout != 0 || f.Defaults.Tracing != 3 {
		t.Errorf("%+v %v", f, err)
	}
	// A positive value under a nanosecond is 0 as a duration: refused where
	// 0 is (a MonitorInterval of 0 panicked the core's monitor).
	_, err = dlp.Parse("t.json", []byte(`[{"object":"Defaults","ConnectTimeout":1e-10,"MonitorInterval":1e-10}]`))
	for _, want := range []string{
		`t.json:1:23: Defaults key "ConnectTimeout": must be greater than 0`,
		`t.json:1:46: Defaults key "MonitorInterval": must be greater than 0`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("tiny durations: %v, want %s", err, want)
		}
	}
	// An empty array is a valid file with no LdapProxy: plain mode.
	f, err = dlp.Parse("z.json", []byte("[]"))
	if err != nil || f.Proxy("ldapConfiguration") != nil {
		t.Errorf("%+v %v", f, err)
	}
}

// JSONCodeSet 0: the Latin-1 file's DNs become UTF-8 and match what a
// client sends.
func TestLatin1File(t *testing.T) {
	f, err := dlp.ParseFile(filepath.Join("testdata", "latin1.json"))
	if err != nil {
		t.Fatal(err)
	}
	r := f.Rules["JUERGEN"]
	if r.ConditionText != "(user=cn=Jürgen Müller,ou=Straße,o=pqr)" {
		t.Errorf("condition %q", r.ConditionText)
	}
	if !r.Condition.Match(&dlp.Ctx{User: dlp.NormalizeDN("CN=JÜRGEN MÜLLER, OU=Straße, O=PQR")}) {
		t.Error("Latin-1 condition does not match the UTF-8 DN")
	}
	if !r.Condition.Match(&dlp.Ctx{User: dlp.NormalizeDN(`cn=J\C3\BCrgen M\C3\BCller,ou=Stra\C3\9Fe,o=pqr`)}) {
		t.Error("Latin-1 condition does not match the hex-escaped DN")
	}
	if f.Defaults.JSONCodeSet != 0 {
		t.Errorf("JSONCodeSet %d", f.Defaults.JSONCodeSet)
	}
}

func TestComments(t *testing.T) {
	f, err := dlp.Parse("c.json", []byte(`// leading
[ /* a block
     comment */ { "object": "LdapServer", /* inline */ "name": "S", // trailing
    "host": "h" },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "R", "actions": ["forwardto(S)"],
    "condition": "(user:regex=^uid=a//b/*c*/)" } // strings keep their slashes
]
/* after */`))
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Rules["R"]; r.ConditionText != "(user:regex=^uid=a//b/*c*/)" || !r.Condition.Match(&dlp.Ctx{User: "uid=a//b//c/"}) {
		t.Errorf("condition %q", r.ConditionText)
	}
	// Escapes in strings are decoded.
	f, err = dlp.Parse("e.json", []byte(`[{"object":"LdapServer","name":"S","host":"h\u0031"}]`))
	if err != nil || f.Servers["S"].Host != "h1" {
		t.Errorf("%v %v", f, err)
	}
}

func TestParseFileMissing(t *testing.T) {
	_, err := dlp.ParseFile(filepath.Join(t.TempDir(), "ldap_proxy.json"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v (want fs.ErrNotExist → plain mode)", err)
	}
}

func TestErrorFormat(t *testing.T) {
	e := &dlp.Error{File: "ldap_proxy.json", Line: 12, Col: 5, Object: `LdapServer "LDAP1"`, Key: "port", Msg: "must be 1..65535"}
	if got := e.Error(); got != `ldap_proxy.json:12:5: LdapServer "LDAP1" key "port": must be 1..65535` {
		t.Errorf("%s", got)
	}
}

// TestParseFileRefusesFIFO: a DLP file that is a FIFO (which would block
// a plain read, at start or on SIGHUP) is refused at once, naming it.
func TestParseFileRefusesFIFO(t *testing.T) {
	testbed.RefusesFIFO(t, "ldap_proxy.json", func(path string) error { _, err := dlp.ParseFile(path); return err })
}
