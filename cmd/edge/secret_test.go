package main

import (
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestMetricsToken: with metrics_token_file the metrics endpoint answers
// 401 to a request without the token or with another one, and the
// metrics to one that carries it (Authorization: Bearer, what fleet
// sends); a token file too short is refused at the check.
func TestMetricsToken(t *testing.T) {
	dir := t.TempDir()
	token := "s3cr3t-metrics-token-0123456789"
	file := testbed.WriteFile(t, dir, "metrics.token", token+"\n")
	e := startEdgeBin(t, "origins: ['"+echoOrigin(t, "A")+"']\nmetrics_token_file: "+file+"\n")
	testbed.WaitTCP(t, e.metrics, 10*time.Second)
	get := func(auth string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+e.metrics+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	for _, auth := range []string{"", "Bearer wrong-token-wrong-token", token, "Bearer " + token + "x"} {
		if code, body, h := get(auth); code != http.StatusUnauthorized || strings.Contains(body, "edgefleet_") || h.Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: status %d, WWW-Authenticate %q, body %.80q; want 401 and no metrics", auth, code, h.Get("WWW-Authenticate"), body)
		}
	}
	if code, body, _ := get("Bearer " + token); code != http.StatusOK || !strings.Contains(body, `edgefleet_edge_origin_up{origin="o1"} 1`) {
		t.Errorf("with the token: status %d, body lacks origin_up{o1}:\n%s", code, grepLines(body, "origin_up"))
	}

	short := testbed.WriteFile(t, dir, "short.token", "abc\n")
	path := testbed.WriteFile(t, dir, "edge.yaml", "origins: ['192.0.2.2:8636']\nmetrics_token_file: "+short+"\n")
	out, err := exec.Command(edgeBin(t), "--config", path, "--check").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "metrics_token_file: "+short+": the token must be at least 16 characters") {
		t.Errorf("a 3-character token: %v\n%s", err, out)
	}
}

// TestOriginAddressNotSaid: an edge whose origins are 192.0.2.77 (refused
// at once: nothing listens there in this namespace) and a loopback echo
// origin never says either address — not in its metrics or their HTTP
// headers, its log lines (start, refusals, offline, close), --check or
// --version — only the origins' names.
func TestOriginAddressNotSaid(t *testing.T) {
	good := echoOrigin(t, "A")
	dead := testbed.FreeAddr(t, "127.0.0.1")
	e := startEdgeBin(t, "origins: [{name: par-a, address: '"+dead+"'}, '"+good+"']\n")
	for range 3 {
		c, tag := dialTag(t, e.addr)
		c.Write([]byte("x"))
		c.Close()
		if tag != "A" {
			t.Fatalf("tag %q", tag)
		}
	}
	testbed.WaitOutput(t, e.Proc, 10*time.Second, `"msg":"origin offline"`, `"origin":"par-a"`, `"msg":"connection closed"`)
	resp, err := http.Get("http://" + e.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var headers strings.Builder
	resp.Header.Write(&headers)
	path := testbed.WriteFile(t, t.TempDir(), "edge.yaml", "origins: [{name: par-a, address: '"+dead+"'}, '"+good+"']\nmetrics: ''\n")
	check, _ := exec.Command(edgeBin(t), "--config", path, "--check").CombinedOutput()
	version, _ := exec.Command(edgeBin(t), "--version").CombinedOutput()
	for where, text := range map[string]string{"metrics": string(body), "metrics headers": headers.String(),
		"log": e.Output(), "--check": string(check), "--version": string(version)} {
		for _, addr := range []string{dead, good} {
			if strings.Contains(text, addr) {
				t.Errorf("%s says origin address %s:\n%s", where, addr, text)
			}
		}
	}
	if !strings.Contains(string(body), `edgefleet_edge_origin_up{origin="par-a"} 0`) || !strings.Contains(string(body), `edgefleet_edge_origin_up{origin="o2"} 1`) {
		t.Errorf("origin_up by name:\n%s", grepLines(string(body), "origin_up"))
	}
	if want := "edge: configuration ok (name "; !strings.HasPrefix(string(check), want) || !strings.Contains(string(check), "origins par-a o2)") {
		t.Errorf("--check: %s", check)
	}
}
