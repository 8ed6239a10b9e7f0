package dlp_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
)

// lbFile is a file with the servers L1, L2 and L3 (lines 2-4) and the
// given LoadBalancer objects, one per line from line 5.
func lbFile(objects ...string) string {
	return "[\n" +
		`  {"object": "LdapServer", "name": "L1", "host": "h1"},` + "\n" +
		`  {"object": "LdapServer", "name": "L2", "host": "h2"},` + "\n" +
		`  {"object": "LdapServer", "name": "L3", "host": "h3"}` +
		strings.Join(append([]string{""}, objects...), ",\n  ") + "\n]\n"
}

// Every LoadBalancer validation error, with its exact message.
func TestLoadBalancerErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		lb   string
		want []string
	}{
		{"no routes", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal"}`,
			[]string{`x.json:5:3: LoadBalancer "LB": missing key "routes"`}},
		{"routes not an array", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": "L1"}`,
			[]string{`x.json:5:68: LoadBalancer "LB" key "routes": must be an array of route objects, found a string`}},
		{"no route", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": []}`,
			[]string{`x.json:5:68: LoadBalancer "LB" key "routes": must list at least one route`}},
		{"route not an object", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": ["L1"]}`,
			[]string{`x.json:5:79: LoadBalancer "LB" key "routes[1]": must be an object, found a string`}},
		{"route without server", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": [{"capacity": 8}]}`,
			[]string{`x.json:5:79: LoadBalancer "LB" key "routes[1]": missing key "server"`}},
		{"server not a name", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": [{"server": 1}]}`,
			[]string{`x.json:5:90: LoadBalancer "LB" key "routes[1].server": must be the name of an LdapServer, found 1`}},
		{"unknown server", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": [{"server": "L9"}]}`,
			[]string{`x.json:5:90: LoadBalancer "LB" key "routes[1].server": no LdapServer named "L9"`}},
		{"server twice", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": [{"server": "L1"}, {"server": "L1"}]}`,
			[]string{`x.json:5:108: LoadBalancer "LB" key "routes[2].server": "L1" is already route 1`}},
		{"unknown route key", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": [{"server": "L1", "Capacity": 3, "cost": 1}]}`,
			[]string{`x.json:5:96: LoadBalancer "LB" key "routes[1].Capacity": unknown key (did you mean "capacity"?)`,
				`x.json:5:111: LoadBalancer "LB" key "routes[1].cost": unknown key`}},
		{"duplicate route key", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": [{"server": "L1", "server": "L2"}]}`,
			[]string{`x.json:5:96: LoadBalancer "LB" key "routes[1].server": duplicate key`}},
		{"route key of another algorithm", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": [{"server": "L1", "weight": 2, "priority": 1, "allowed": ["uid"]}]}`,
			[]string{`x.json:5:96: LoadBalancer "LB" key "routes[1].weight": applies to the proportional algorithm only`,
				`x.json:5:109: LoadBalancer "LB" key "routes[1].priority": applies to the failover, saturation and searchfilter algorithms only`,
				`x.json:5:124: LoadBalancer "LB" key "routes[1].allowed": applies to the searchfilter algorithm only`}},
		{"key of another algorithm", `{"object": "LoadBalancer", "name": "LB", "algorithm": "proportional", "switchback": 1, "precision": 3, "threshold": 50, "alert": 40, "routes": [{"server": "L1"}]}`,
			[]string{`x.json:5:73: LoadBalancer "LB" key "switchback": applies to the failover algorithm only`,
				`x.json:5:90: LoadBalancer "LB" key "precision": applies to the optimal algorithm only`,
				`x.json:5:106: LoadBalancer "LB" key "threshold": applies to the saturation algorithm only`,
				`x.json:5:123: LoadBalancer "LB" key "alert": applies to the saturation algorithm only`}},
		{"capacity", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "routes": [{"server": "L1", "capacity": 0}, {"server": "L2", "capacity": 2.5}]}`,
			[]string{`x.json:5:108: LoadBalancer "LB" key "routes[1].capacity": must be an integer 1..1000000 (operations in flight at 100 % saturation), found 0`,
				`x.json:5:141: LoadBalancer "LB" key "routes[2].capacity": must be an integer 1..1000000 (operations in flight at 100 % saturation), found 2.5`}},
		{"capacity differs between balancers", `{"object": "LoadBalancer", "name": "A", "algorithm": "optimal", "routes": [{"server": "L1", "capacity": 8}]}`,
			[]string{`x.json:6:89: LoadBalancer "B" key "routes[1].capacity": capacity 64 differs from the 8 LoadBalancer "A" gives L1 on line 5: a server has one capacity`},
		},
		{"failover without priority", `{"object": "LoadBalancer", "name": "LB", "algorithm": "failover", "routes": [{"server": "L1"}]}`,
			[]string{`x.json:5:80: LoadBalancer "LB" key "routes[1]": missing key "priority" (a number, or an object of numbers by operation type; lower is preferred)`}},
		{"priority values", `{"object": "LoadBalancer", "name": "LB", "algorithm": "failover", "routes": [{"server": "L1", "priority": 0}, {"server": "L2", "priority": "1"}, {"server": "L3", "priority": {"add": 1, "srch": 2, "bind": -1, "add": 3}}]}`,
			[]string{`x.json:5:109: LoadBalancer "LB" key "routes[1].priority": must be an integer 1..1000000, found 0`,
				`x.json:5:142: LoadBalancer "LB" key "routes[2].priority": must be an integer 1..1000000 or an object of them by operation type, found "1"`,
				`x.json:5:188: LoadBalancer "LB" key "routes[3].priority": unknown operation type "srch" (want bind, search, compare, add, modify, delete, modrdn, extended, default)`,
				`x.json:5:207: LoadBalancer "LB" key "routes[3].priority.bind": must be an integer 1..1000000, found -1`,
				`x.json:5:211: LoadBalancer "LB" key "routes[3].priority": add is given twice`}},
		{"switchback", `{"object": "LoadBalancer", "name": "LB", "algorithm": "failover", "switchback": "yes", "routes": [{"server": "L1", "priority": 1}]}`,
			[]string{`x.json:5:69: LoadBalancer "LB" key "switchback": must be 0 or 1, found "yes"`}},
		{"precision", `{"object": "LoadBalancer", "name": "LB", "algorithm": "optimal", "precision": 101, "routes": [{"server": "L1"}]}`,
			[]string{`x.json:5:68: LoadBalancer "LB" key "precision": must be a percentage 0..100, found 101`}},
		{"saturation without threshold", `{"object": "LoadBalancer", "name": "LB", "algorithm": "saturation", "routes": [{"server": "L1", "priority": 1}]}`,
			[]string{`x.json:5:3: LoadBalancer "LB": missing key "threshold" (percent; the saturation algorithm needs one)`}},
		{"threshold and alert", `{"object": "LoadBalancer", "name": "LB", "algorithm": "saturation", "threshold": 0, "alert": "60", "routes": [{"server": "L1", "priority": 1}]}`,
			[]string{`x.json:5:71: LoadBalancer "LB" key "threshold": must be a percentage above 0 and at most 100, found 0`,
				`x.json:5:87: LoadBalancer "LB" key "alert": must be a number, found "60"`}},
		{"weights", `{"object": "LoadBalancer", "name": "LB", "algorithm": "proportional", "routes": [{"server": "L1", "weight": {"search": -1, "bind": 1.5}}, {"server": "L2", "weight": true}]}`,
			[]string{`x.json:5:122: LoadBalancer "LB" key "routes[1].weight.search": must be an integer 0..1000000, found -1`,
				`x.json:5:134: LoadBalancer "LB" key "routes[1].weight.bind": must be an integer 0..1000000, found 1.5`,
				`x.json:5:168: LoadBalancer "LB" key "routes[2].weight": must be an integer 0..1000000 or an object of them by operation type, found true`}},
		{"weight 0 everywhere", `{"object": "LoadBalancer", "name": "LB", "algorithm": "proportional", "routes": [{"server": "L1", "weight": {"bind": 0, "add": 0}}, {"server": "L2", "weight": {"bind": 0, "default": 1}}]}`,
			[]string{`x.json:5:73: LoadBalancer "LB" key "routes": every route has weight 0 for bind: such operations could never be served`}},
		{"attribute lists", `{"object": "LoadBalancer", "name": "LB", "algorithm": "searchfilter", "routes": [{"server": "L1", "priority": 1, "allowed": "uid"}, {"server": "L2", "priority": 2, "allowed": ["cn", "", "CN"]}]}`,
			[]string{`x.json:5:127: LoadBalancer "LB" key "routes[1].allowed": must be an array of attribute names, found a string`,
				`x.json:5:185: LoadBalancer "LB" key "routes[2].allowed": must be an array of attribute names, found ""`,
				`x.json:5:189: LoadBalancer "LB" key "routes[2].allowed": "CN" is listed twice`}},
		{"prohibited without allowed", `{"object": "LoadBalancer", "name": "LB", "algorithm": "searchfilter", "routes": [{"server": "L1", "priority": 1, "prohibited": ["mail"]}]}`,
			[]string{`x.json:5:116: LoadBalancer "LB" key "routes[1].prohibited": needs allowed attributes too: a search matches a route by an allowed attribute (a pass-through route has neither list)`}},
		{"allowed and prohibited", `{"object": "LoadBalancer", "name": "LB", "algorithm": "searchfilter", "routes": [{"server": "L1", "priority": 1, "allowed": ["uid", "mail"], "prohibited": ["Mail"]}]}`,
			[]string{`x.json:5:144: LoadBalancer "LB" key "routes[1].prohibited": "mail" is both allowed and prohibited`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []string{tc.lb}
			if tc.name == "capacity differs between balancers" {
				objs = append(objs, `{"object": "LoadBalancer", "name": "B", "algorithm": "optimal", "routes": [{"server": "L1"}]}`)
			}
			_, err := dlp.Parse("x.json", []byte(lbFile(objs...)))
			if err == nil {
				t.Fatalf("accepted:\n%s", lbFile(objs...))
			}
			if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, tc.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(tc.want, "\n"))
			}
		})
	}
}

// The keys of each algorithm land in the Balancer, with the defaults of
// docs/balancers.md.
func TestLoadBalancerKeys(t *testing.T) {
	f, err := dlp.Parse("x.json", []byte(lbFile(
		`{"object": "LoadBalancer", "name": "FO", "algorithm": "failover", "switchback": 1, "routes": [{"server": "L1", "priority": {"add": 1, "default": 3}}, {"server": "L2", "priority": 2, "capacity": 10}]}`,
		`{"object": "LoadBalancer", "name": "FOT", "algorithm": "failover", "switchback": true, "routes": [{"server": "L1", "priority": 1}]}`,
		`{"object": "LoadBalancer", "name": "FOD", "algorithm": "failover", "routes": [{"server": "L1", "priority": 1}]}`,
		`{"object": "LoadBalancer", "name": "OPT", "algorithm": "optimal", "routes": [{"server": "L1"}]}`,
		`{"object": "LoadBalancer", "name": "PROP", "algorithm": "proportional", "routes": [{"server": "L1", "weight": {"search": 2, "bind": 1}}, {"server": "L2", "weight": {"bind": 0}, "capacity": 10}]}`,
		`{"object": "LoadBalancer", "name": "SAT", "algorithm": "saturation", "threshold": 70, "alert": 60.5, "routes": [{"server": "L1", "priority": 1}]}`,
		`{"object": "LoadBalancer", "name": "SF", "algorithm": "searchfilter", "routes": [{"server": "L3", "priority": 1, "allowed": ["UID"], "prohibited": ["mail"]}, {"server": "L1", "priority": 2}]}`,
	)))
	if err != nil {
		t.Fatal(err)
	}
	fo := f.Balancers["FO"]
	if !fo.Switchback || fo.Routes[0].PriorityFor("add") != 1 || fo.Routes[0].PriorityFor("bind") != 3 || fo.Routes[1].PriorityFor("add") != 2 {
		t.Errorf("FO %+v", fo)
	}
	if !f.Balancers["FOT"].Switchback || f.Balancers["FOD"].Switchback {
		t.Errorf("switchback: true gives %v, left out gives %v (want true, and the default false)", f.Balancers["FOT"].Switchback, f.Balancers["FOD"].Switchback)
	}
	if f.Capacity("L2") != 10 || f.Capacity("L1") != dlp.DefaultCapacity || f.Capacity("L3") != 64 {
		t.Errorf("capacities L1 %d L2 %d L3 %d", f.Capacity("L1"), f.Capacity("L2"), f.Capacity("L3"))
	}
	if opt := f.Balancers["OPT"]; opt.Precision != 5 {
		t.Errorf("OPT precision %v, want the default 5", opt.Precision)
	}
	p := f.Balancers["PROP"].Routes
	if p[0].WeightFor("search") != 2 || p[0].WeightFor("delete") != 1 || p[1].WeightFor("bind") != 0 || p[1].WeightFor("search") != 1 {
		t.Errorf("PROP weights %+v %+v", p[0], p[1])
	}
	if sat := f.Balancers["SAT"]; sat.Threshold != 70 || sat.Alert != 60.5 {
		t.Errorf("SAT %+v", sat)
	}
	if sf := f.Balancers["SF"].Routes[0]; !slices.Equal(sf.Allowed, []string{"uid"}) || !slices.Equal(sf.Prohibited, []string{"mail"}) {
		t.Errorf("SF %+v", sf)
	}
}
