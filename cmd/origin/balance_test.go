package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/go-ldap/ldap/v3"
)

// The origin binary with a balance(LB) rule over a real slapd: a client's
// bind is balanced, GET /backends on peers_api lists the backends' states
// and the metrics of docs/balancers.md are served.
func TestBackendsAPI(t *testing.T) {
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{})
	bin := buildOrigin(t)
	coreAddr, peersAPI, metrics := testbed.FreeAddr(t, "127.0.0.1"), testbed.FreeAddr(t, "127.0.0.1"), testbed.FreeAddr(t, "127.0.0.1")
	host, port, _ := net.SplitHostPort(sl[0].Addr)
	dir := t.TempDir()
	testbed.WriteFile(t, dir, "ldap_proxy.json", fmt.Sprintf(`[
  {"object": "Defaults", "MonitorInterval": 2},
  {"object": "LdapServer", "name": "L1", "host": %q, "port": %s},
  {"object": "LdapServer", "name": "DOWN", "host": "127.0.0.1", "port": %s},
  {"object": "LoadBalancer", "name": "LB", "algorithm": "failover", "routes": [{"server": "L1", "priority": 1, "capacity": 16}, {"server": "DOWN", "priority": 2}]},
  {"object": "ProxyRule", "ruleType": "UserRouting", "name": "ALL", "condition": "(user=*)", "actions": ["balance(LB)"]},
  {"object": "LdapProxy", "name": "ldapConfiguration", "rules": ["ALL"]}
]`, host, port, strings.Split(testbed.FreeAddr(t, "127.0.0.1"), ":")[1]))
	cfg := testbed.WriteFile(t, dir, "origin.yaml", fmt.Sprintf(`front:
  listen: ["127.0.0.1:0"]
  inner: %q
peers_api: %q
metrics: %q
core:
  listen: %q
  config: %s/ldap_proxy.json
`, coreAddr, peersAPI, metrics, coreAddr, dir))
	p := testbed.Start(t, bin, "--config", cfg)
	testbed.WaitTCP(t, coreAddr, 10*time.Second)
	testbed.WaitTCP(t, peersAPI, 10*time.Second)
	c, err := ldap.DialURL("ldap://" + coreAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Bind(testbed.User("alice"), "alice-pw"); err != nil {
		t.Fatalf("bind: %v\n%s", err, p.Output())
	}
	type backend struct {
		Name       string  `json:"name"`
		Up         bool    `json:"up"`
		State      string  `json:"state"`
		Capacity   int     `json:"capacity"`
		InFlight   int     `json:"in_flight"`
		Saturation float64 `json:"saturation"`
		LastCheck  string  `json:"last_check"`
		CheckError string  `json:"check_error"`
	}
	var bs []backend
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + peersAPI + "/backends")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&bs)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) == 2 && bs[0].LastCheck != "" && bs[1].State == "down" || time.Now().After(deadline) {
			break
		}
	}
	if len(bs) != 2 || bs[0].Name != "L1" || !bs[0].Up || bs[0].State != "up" || bs[0].Capacity != 16 || bs[0].LastCheck == "" ||
		bs[1].Name != "DOWN" || bs[1].Up || bs[1].State != "down" || bs[1].Saturation != 100 || bs[1].CheckError == "" {
		t.Fatalf("GET /backends = %+v", bs)
	}
	text := testbed.Scrape(t, metrics)
	for _, want := range []string{
		`edgefleet_core_backend_up{server="L1"} 1`,
		`edgefleet_core_backend_up{server="DOWN"} 0`,
		`edgefleet_core_backend_saturation{server="DOWN"} 100`,
		`edgefleet_core_operations_total{op="bind",result="success",server="L1"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// L1's saturation is what is left of one bind in flight for a moment:
	// above 0, far below 1 %.
	_, v, _ := strings.Cut(text, `edgefleet_core_backend_saturation{server="L1"} `)
	v, _, _ = strings.Cut(v, "\n")
	if sat, err := strconv.ParseFloat(v, 64); err != nil || sat < 0 || sat >= 1 {
		t.Errorf("L1 saturation %q, want a value below 1 %%", v)
	}
}
