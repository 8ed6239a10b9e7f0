package origin

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// The tests in this file put real PROXY senders in front of the front:
// HAProxy (send-proxy-v2) and nginx stream (proxy_protocol, v1), each
// bound to a trusted source address (127.0.0.2) and to an untrusted one
// (127.0.0.3); and real TLS clients (Go crypto/tls, openssl s_client)
// talking straight to the front with no header.

// client is the address the test's client dials the edge from, so the
// claimed address is known exactly.
const clientIP = "127.0.0.9"

func TestHAProxySendProxyV2(t *testing.T) {
	h := newHarness(t, nil)
	trusted := testbed.FreeAddr(t, "127.0.0.1")
	untrusted := testbed.FreeAddr(t, "127.0.0.1")
	// The trusted server line also health-checks the front every 100ms:
	// HAProxy sends those checks with a v2 LOCAL header and closes.
	testbed.HAProxyMaxconn(t, 4000, fmt.Sprintf(`
frontend fe_trusted
    bind %s
    unique-id-format hap-%%ci:%%cp
    default_backend be_trusted
frontend fe_untrusted
    bind %s
    default_backend be_untrusted
backend be_trusted
    server front %s send-proxy-v2 proxy-v2-options unique-id source 127.0.0.2 check inter 100ms
backend be_untrusted
    server front %s send-proxy-v2 source 127.0.0.3
`, trusted, untrusted, h.addr, h.addr), trusted)

	for i := range 3 {
		c := dialFrom(t, clientIP, trusted)
		p := roundTrip(t, c, nil, payload)
		client := c.LocalAddr().String()
		if p.Claimed != client || hostOf(t, p.Measured) != "127.0.0.2" || p.Header != HeaderV2 || p.ID != "hap-"+client {
			t.Fatalf("connection %d: inner saw %+v; want claimed %s, measured 127.0.0.2:*, id hap-%s", i, p, client, client)
		}
		c.Close()
	}

	expectSpoof(t, h, untrusted, HeaderV2)

	// Health checks: LOCAL header, no payload, counted and never logged.
	eventually(t, "a LOCAL health check", func() bool { return h.metric(conns(HeaderLocal, ResultOK)) >= 1 })
	for _, l := range h.logs.JSONLines("connection closed") {
		if l["header"] != HeaderV2 || l["claimed"] == "" {
			t.Errorf("unexpected close line %v", l)
		}
	}
}

func TestNginxProxyProtocolV1(t *testing.T) {
	h := newHarness(t, nil)
	trusted := testbed.FreeAddr(t, "127.0.0.1")
	untrusted := testbed.FreeAddr(t, "127.0.0.1")
	testbed.Nginx(t, fmt.Sprintf(`
server { listen %s; proxy_pass %s; proxy_protocol on; proxy_bind 127.0.0.2; }
server { listen %s; proxy_pass %s; proxy_protocol on; proxy_bind 127.0.0.3; }
`, trusted, h.addr, untrusted, h.addr), "", trusted)

	for i := range 3 {
		c := dialFrom(t, clientIP, trusted)
		p := roundTrip(t, c, nil, payload)
		if p.Claimed != c.LocalAddr().String() || hostOf(t, p.Measured) != "127.0.0.2" || p.Header != HeaderV1 {
			t.Fatalf("connection %d: inner saw %+v; want claimed %s, measured 127.0.0.2:*, header v1", i, p, c.LocalAddr())
		}
		c.Close()
	}

	expectSpoof(t, h, untrusted, HeaderV1)
	h.settled()
}

// TestUntrustedRejectWithHAProxy: under untrusted: reject, HAProxy bound
// to an untrusted address is closed before a byte is read.
func TestUntrustedRejectWithHAProxy(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Untrusted = UntrustedReject })
	untrusted := testbed.FreeAddr(t, "127.0.0.1")
	testbed.HAProxyMaxconn(t, 4000, fmt.Sprintf(`
listen untrusted
    bind %s
    server front %s send-proxy-v2 source 127.0.0.3
`, untrusted, h.addr), untrusted)
	c := dialFrom(t, clientIP, untrusted)
	c.Write(payload)
	expectClosed(t, c)
	eventually(t, "untrusted connection counted", func() bool {
		return h.metric(conns(HeaderNone, ResultUntrusted)) >= 1
	})
	if n := h.inner.count(); n != 0 {
		t.Fatalf("inner dialled %d times", n)
	}
}

// tlsInner is a TLS echo service as the inner: it reports the peer it
// looked up and whether its handshake completed.
type tlsInner struct {
	addr   string
	caPEM  []byte
	result chan tlsResult
}

type tlsResult struct {
	peer    Peer
	found   bool
	version uint16
	err     error
}

func startTLSInner(t *testing.T, table *PeerTable) *tlsInner {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "origin.test"},
		DNSNames:              []string{"origin.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in := &tlsInner{
		addr:   ln.Addr().String(),
		caPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		result: make(chan tlsResult, 16),
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}}
	testbed.ServeConns(t, ln, func(c net.Conn) {
		p, ok := table.LookupAddr(c.RemoteAddr().(*net.TCPAddr).AddrPort())
		tc := tls.Server(c, conf)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		err := tc.Handshake()
		in.result <- tlsResult{peer: p, found: ok, version: tc.ConnectionState().Version, err: err}
		if err == nil {
			io.Copy(tc, tc)
		}
	})
	return in
}

func TestTLSClientWithoutHeader(t *testing.T) {
	var inner *tlsInner
	h := newHarnessWith(t, "127.0.0.1", func(table *PeerTable) string {
		inner = startTLSInner(t, table)
		return inner.addr
	}, nil)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(inner.caPEM)
	// untrusted and trusted: neither sends a header; the untrusted one
	// counts in the one share of every untrusted source, the core's
	// handshake queue "untrusted" (front.per_edge).
	for from, share := range map[string]string{"127.0.0.7": UntrustedShare, "127.0.0.2": "127.0.0.2"} {
		t.Run("go crypto/tls from "+from, func(t *testing.T) {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
			c, err := tls.DialWithDialer(d, "tcp", h.addr, &tls.Config{RootCAs: pool, ServerName: "origin.test"})
			if err != nil {
				t.Fatalf("handshake through the front: %v", err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			msg := []byte("ping over tls")
			c.Write(msg)
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
				t.Fatalf("echo %q, %v", got, err)
			}
			r := <-inner.result
			want := Peer{InnerPort: r.peer.InnerPort, Measured: c.LocalAddr().String(), Header: HeaderNone, Since: r.peer.Since,
				Inner: r.peer.Inner, Share: share}
			if r.err != nil || !r.found || r.peer != want {
				t.Fatalf("inner: %+v, want peer %+v", r, want)
			}
		})
	}

	t.Run("openssl s_client", func(t *testing.T) {
		testbed.Need(t, "openssl")
		ca := testbed.WriteFile(t, t.TempDir(), "ca.pem", string(inner.caPEM))
		bin, _ := testbed.Path("openssl")
		cmd := exec.Command(bin, "s_client", "-connect", h.addr, "-servername", "origin.test",
			"-CAfile", ca, "-verify_return_error", "-brief")
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("openssl s_client: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "CONNECTION ESTABLISHED") || !strings.Contains(string(out), "Verification: OK") {
			t.Fatalf("openssl s_client output:\n%s", out)
		}
		r := <-inner.result
		if r.err != nil || r.version != tls.VersionTLS13 || !r.found || r.peer.Header != HeaderNone || r.peer.Claimed != "" || hostOf(t, r.peer.Measured) != "127.0.0.1" {
			t.Fatalf("inner: %+v", r)
		}
	})
	h.settled()
}

// expectSpoof sends a payload through the real proxy listening on
// untrusted (which binds 127.0.0.3, outside trusted_edges) and checks the
// front treats its header as a spoof: closed, counted once in both
// metrics, one refusal line with the measured source.
func expectSpoof(t *testing.T, h *harness, untrusted, header string) {
	t.Helper()
	c := dialFrom(t, clientIP, untrusted)
	c.Write(payload)
	expectClosed(t, c)
	eventually(t, "spoofed header counted", func() bool {
		return h.metric("edgefleet_origin_spoofed_headers_total", nil) == 1
	})
	if got := h.metric(conns(header, ResultSpoofed)); got != 1 {
		t.Errorf("connections_total{%s,spoofed} = %v", header, got)
	}
	if lines := h.logs.JSONLines("spoofed proxy header"); len(lines) != 1 || hostOf(t, lines[0]["measured"].(string)) != "127.0.0.3" {
		t.Errorf("spoof log lines: %v", lines)
	}
}
