package probe_test

import (
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/edgefleet/edgefleet/probe"
)

func TestClientTLS(t *testing.T) {
	p := testbed.NewPKI(t)
	conf, err := probe.ClientTLS(p.Path("ca.pem"), p.Path("agent.pem"), p.Path("agent.key"), "ldap.example.com")
	if err != nil || conf.ServerName != "ldap.example.com" || conf.RootCAs == nil || len(conf.Certificates) != 1 {
		t.Fatalf("ClientTLS: %+v %v", conf, err)
	}
	if conf, err := probe.ClientTLS("", "", "", "n"); err != nil || conf.RootCAs != nil || len(conf.Certificates) != 0 {
		t.Fatalf("system roots, no certificate: %+v %v", conf, err)
	}
	for _, tc := range []struct{ ca, cert, key, want string }{
		{p.Path("missing.pem"), "", "", "read ca"},
		{p.Path("agent.key"), "", "", "no PEM certificate"},
		{"", p.Path("agent.pem"), "", "give both cert and key"},
		{"", p.Path("agent.pem"), p.Path("server.key"), "client certificate"},
	} {
		if _, err := probe.ClientTLS(tc.ca, tc.cert, tc.key, "n"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ClientTLS(%q, %q, %q): %v, want %q", tc.ca, tc.cert, tc.key, err, tc.want)
		}
	}
}
