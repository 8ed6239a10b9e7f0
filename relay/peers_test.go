package relay

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestHAProxyReadsV2 puts HAProxy 2.6 behind the edge with accept-proxy:
// HAProxy answers each HTTP request with the source address and port it
// took from our v2 header and the UNIQUE_ID TLV, which must be the
// client's own address and the id the edge logged.
func TestHAProxyReadsV2(t *testing.T) {
	testbed.Need(t, "haproxy")
	addr := testbed.FreeAddr(t, "127.0.0.1")
	testbed.HAProxyMaxconn(t, 4000, `
frontend fe
    mode http
    bind `+addr+` accept-proxy
    http-request return status 200 content-type text/plain lf-string "%[src]:%[src_port] %[fc_pp_unique_id] %[dst]:%[dst_port]"
`, addr)
	e := startEdge(t, Config{Name: "edge-h", Origins: OriginList(addr)})

	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	c.Close()
	line := e.waitLines(t, "connection closed", 1)[0]
	want := c.LocalAddr().String() + " " + line["id"].(string) + " " + e.addr
	if resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("HAProxy saw %q (status %d), want %q", body, resp.StatusCode, want)
	}
}

// TestNginxReadsV1 puts an nginx stream server with `listen … proxy_protocol`
// behind the edge in v1 mode; nginx returns the address it read from our
// header, which must be the client's.
func TestNginxReadsV1(t *testing.T) {
	testbed.Need(t, "nginx")
	addr := testbed.FreeAddr(t, "127.0.0.1")
	testbed.Nginx(t, `
    server {
        listen `+addr+` proxy_protocol;
        return "$proxy_protocol_addr:$proxy_protocol_port $proxy_protocol_server_addr:$proxy_protocol_server_port";
    }
`, "", addr)
	e := startEdge(t, Config{Origins: OriginList(addr), ProxyProtocol: ProxyV1})

	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	want := c.LocalAddr().String() + " " + e.addr
	if strings.TrimSpace(string(got)) != want {
		t.Fatalf("nginx saw %q, want %q", got, want)
	}
}
