package relay

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/clienthello"
	"github.com/edgefleet/edgefleet/internal/evloop"
	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/pires/go-proxyproto"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// served is the name the gated edges serve: the testbed PKI's server name.
const served = testbed.ServerName

// countingListener counts the connections an origin accepted: a refused
// client must never have reached it.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// tlsOrigin is a TLS-terminating origin behind a PROXY v2 header (the
// PKI's server certificate): it records the first bytes after the header,
// completes the handshake and answers "ok".
type tlsOrigin struct {
	ln     *countingListener
	hellos chan []byte
}

func startTLSOrigin(t *testing.T, pki *testbed.PKI) *tlsOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &tlsOrigin{ln: &countingListener{Listener: ln}, hellos: make(chan []byte, 100)}
	testbed.ServeConns(t, o.ln, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		r := bufio.NewReaderSize(c, 64<<10)
		if _, err := proxyproto.Read(r); err != nil {
			return
		}
		hello, err := readClientHello(r)
		o.hellos <- hello
		if err != nil {
			return
		}
		tc := tls.Server(prefixConn{Conn: c, r: io.MultiReader(strings.NewReader(string(hello)), r)},
			&tls.Config{Certificates: []tls.Certificate{pki.Server}})
		if tc.Handshake() != nil {
			return
		}
		io.WriteString(tc, "ok")
		tc.Close()
	})
	return o
}

// readClientHello reads one whole ClientHello from r.
func readClientHello(r *bufio.Reader) ([]byte, error) {
	var b []byte
	for clienthello.Check(b, nil) == clienthello.ErrMore {
		c, err := r.ReadByte()
		if err != nil {
			return b, err
		}
		b = append(b, c)
	}
	return b, clienthello.Check(b, nil)
}

type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// gated starts an edge with the gate in front of o.
func gated(t *testing.T, g TLSGate, origin string) *testEdge {
	t.Helper()
	if g.HelloTimeout == 0 {
		g.HelloTimeout = 30 * time.Second
	}
	return startEdge(t, Config{Origins: OriginList(origin), TLSGate: g})
}

// sendTo connects to the edge and sends b; the connection has 30 s.
func sendTo(t *testing.T, te *testEdge, b []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	c.Write(b)
	return c
}

// echoedThrough sends b through the gated edge te to its echoing origin
// and checks that all of it comes back.
func echoedThrough(t *testing.T, te *testEdge, b []byte) {
	t.Helper()
	c := sendTo(t, te, b)
	defer c.Close()
	got := make([]byte, len(b))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != string(b) {
		t.Fatalf("echoed %d bytes: %v", len(got), err)
	}
}

// refused sends b, reads until the edge closes, and checks the result's
// count and that the origin accepted nothing.
func refused(t *testing.T, te *testEdge, o *countingListener, b []byte, fin bool, result string) {
	t.Helper()
	before := te.value(t, "edgefleet_edge_connections_total", "result", result)
	c := sendTo(t, te, b)
	defer c.Close()
	if fin {
		c.(*net.TCPConn).CloseWrite()
	}
	if _, err := io.ReadAll(c); isTimeout(err) {
		t.Fatalf("not closed: %v", err)
	}
	te.waitValue(t, before+1, "edgefleet_edge_connections_total", "result", result)
	if n := o.n.Load(); n != 0 {
		t.Fatalf("the origin accepted %d connections", n)
	}
}

// TestGateRealClients: with server_names, openssl s_client and Go
// crypto/tls for the name get through to a TLS origin, which sees the
// PROXY header and then the ClientHello; for another name they are
// refused as wrong-sni and the origin is never dialled.
func TestGateRealClients(t *testing.T) {
	pki := testbed.NewPKI(t)
	o := startTLSOrigin(t, pki)
	te := gated(t, TLSGate{ServerNames: []string{"other.example.test", strings.ToUpper(served)}}, o.ln.Addr().String())
	dialGo := func(name string) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", te.addr,
			&tls.Config{ServerName: name, RootCAs: pki.Pool, InsecureSkipVerify: name != served})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = io.ReadAll(c)
		return err
	}
	t.Run("openssl", func(t *testing.T) {
		out, err := testbed.SClient(t, te.addr, pki.Path("ca.pem"), pki.Path("agent.pem"), pki.Path("agent.key"), "-servername", served)
		// "Verification: OK" follows the handshake at once; "Verify return
		// code" comes with the session's details, which s_client may not
		// print when the origin closes first (seen under load).
		if err != nil || !strings.Contains(out, "Verification: OK") && !strings.Contains(out, "Verify return code: 0 (ok)") {
			t.Fatalf("%v:\n%s", err, out)
		}
		if h := <-o.hellos; clienthello.Check(h, []string{served}) != nil {
			t.Fatalf("the origin got %x after the header", h)
		}
	})
	t.Run("go", func(t *testing.T) {
		if err := dialGo(served); err != nil {
			t.Fatal(err)
		}
		<-o.hellos
	})
	accepted := o.ln.n.Load()
	t.Run("openssl wrong name", func(t *testing.T) {
		out, err := testbed.SClient(t, te.addr, pki.Path("ca.pem"), pki.Path("agent.pem"), pki.Path("agent.key"), "-servername", "evil.example.test")
		if err == nil {
			t.Fatalf("passed:\n%s", out)
		}
		te.waitValue(t, 1, "edgefleet_edge_connections_total", "result", ResultWrongSNI)
	})
	t.Run("go wrong name", func(t *testing.T) {
		if err := dialGo("evil.example.test"); err == nil {
			t.Fatal("passed")
		}
		te.waitValue(t, 2, "edgefleet_edge_connections_total", "result", ResultWrongSNI)
	})
	if n := o.ln.n.Load(); n != accepted {
		t.Fatalf("the origin accepted %d connections for the wrong names", n-accepted)
	}
	line := te.waitLines(t, "client refused by the tls gate", 2)[0]
	if line["result"] != ResultWrongSNI || !strings.Contains(line["err"].(string), "evil.example.test") {
		t.Fatalf("log line %v", line)
	}
}

// TestGateRefusesWhatIsNoHello: garbage, a PROXY v2 header (not-tls:
// the gate decides before the client-proxy screen would), an SSLv2-style
// hello, an LDAP PDU, a hello cut by the client's close and one over
// clienthello.MaxLen (16389) bytes are not-tls; a silent client (or one that stops mid-hello) is
// hello-timeout, past a 300 ms hello_timeout (for a silent one counted
// from when the kernel completes it without data, a second after its
// handshake under TCP_DEFER_ACCEPT: TestGateDefersAccept); a zero-byte
// connection is empty. None reaches the origin.
func TestGateRefusesWhatIsNoHello(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := &countingListener{Listener: raw}
	serveOrigin(t, origin, true, echo)
	te := gated(t, TLSGate{Mode: GateOn, HelloTimeout: 300 * time.Millisecond}, origin.Addr().String())
	hello := goHello(t, served)
	for _, tc := range []struct {
		name   string
		b      []byte
		result string
	}{
		{"garbage", []byte("\x00\x01garbage\xff\xfe"), ResultNotTLS},
		{"PROXY v2 header", []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c\xc0\x00\x02\x01\xc0\x00\x02\x02\x30\x39\x01\xbb"), ResultNotTLS},
		{"PROXY v1 header", []byte("PROXY TCP4 192.0.2.1 192.0.2.2 12345 443\r\n"), ResultNotTLS},
		{"SSLv2-style hello", []byte{0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10, 0x07, 0x00, 0xc0}, ResultNotTLS},
		{"LDAP bind", []byte{0x30, 0x0c, 0x02, 0x01, 0x01, 0x60, 0x07, 0x02, 0x01, 0x03, 0x04, 0x00, 0x80, 0x00}, ResultNotTLS},
		{"a hello cut short by a close", hello[:len(hello)/2], ResultNotTLS},
		{"a hello cut short, then silence", hello[:len(hello)/2], ResultHelloTimeout},
		{"one byte over MaxLen", padHello(t, hello, clienthello.MaxLen+1), ResultNotTLS},
		{"silence", nil, ResultHelloTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, te, origin, tc.b, strings.Contains(tc.name, "close"), tc.result) })
	}
	t.Run("zero bytes", func(t *testing.T) {
		c, err := net.Dial("tcp", te.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		te.waitValue(t, 1, "edgefleet_edge_connections_total", "result", ResultEmpty)
		if n := origin.n.Load(); n != 0 {
			t.Fatalf("the origin accepted %d connections", n)
		}
	})
	if v := te.value(t, "edgefleet_edge_client_proxy_headers_total"); v != 0 {
		t.Fatalf("client_proxy_headers_total = %v: the gate refused them first", v)
	}
	// 4353 bytes and more grow the first read past its small buffer; a
	// resumed hello whose ticket holds an RSA-4096 client chain is about
	// 4.6 KB (docs/edge.md).
	for _, size := range []int{4352, 4353, 4700, clienthello.MaxLen} {
		t.Run(fmt.Sprintf("%d bytes pass", size), func(t *testing.T) { echoedThrough(t, te, padHello(t, hello, size)) })
	}
}

// TestGateSplitHello: a real Go client whose ClientHello goes out one byte
// per TCP segment, with pauses, passes; so does an SNI-less one with mode
// on and no server_names.
func TestGateSplitHello(t *testing.T) {
	pki := testbed.NewPKI(t)
	o := startTLSOrigin(t, pki)
	for _, tc := range []struct {
		name string
		g    TLSGate
		sni  string
	}{
		{"server_names", TLSGate{ServerNames: []string{served}}, served},
		{"mode on, no SNI", TLSGate{Mode: GateOn}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te := gated(t, tc.g, o.ln.Addr().String())
			raw, err := net.Dial("tcp", te.addr)
			if err != nil {
				t.Fatal(err)
			}
			raw.SetDeadline(time.Now().Add(60 * time.Second))
			c := tls.Client(&bytewise{Conn: raw}, &tls.Config{ServerName: tc.sni, RootCAs: pki.Pool, InsecureSkipVerify: tc.sni == ""})
			defer c.Close()
			if b, err := io.ReadAll(c); err != nil || string(b) != "ok" {
				t.Fatalf("%q, %v", b, err)
			}
			if h := <-o.hellos; len(h) < 200 {
				t.Fatalf("the origin got a %d-byte hello", len(h))
			}
		})
	}
}

// bytewise sends its first write one byte per write (TCP_NODELAY, Go's
// default, makes each a segment), 200 µs apart.
type bytewise struct {
	net.Conn
	done bool
}

func (c *bytewise) Write(p []byte) (int, error) {
	if c.done {
		return c.Conn.Write(p)
	}
	c.done = true
	for i := range p {
		if _, err := c.Conn.Write(p[i : i+1]); err != nil {
			return i, err
		}
		time.Sleep(200 * time.Microsecond)
	}
	return len(p), nil
}

// TestGateLdapsearch: ldapsearch through a gated edge to slapd serving
// LDAPS (proxy_protocol off). By IP it sends no SNI: wrong-sni with
// server_names, through with mode on. By name (resolved in a private
// mount namespace with its own /etc/hosts, as root) it passes
// server_names.
func TestGateLdapsearch(t *testing.T) {
	testbed.Need(t, "ldapsearch")
	pki := testbed.NewPKI(t)
	sl := testbed.StartSlapds(t, 1, testbed.SlapdConfig{TLSCert: pki.Path("server.pem"), TLSKey: pki.Path("server.key")})[0]
	search := func(te *testEdge, host string, wrap ...string) (string, error) {
		_, port, _ := net.SplitHostPort(te.addr)
		args := append(wrap, "ldapsearch", "-x", "-H", "ldaps://"+net.JoinHostPort(host, port), "-b", testbed.Suffix, "-s", "base", "-o", "nettimeout=20")
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "LDAPTLS_CACERT="+pki.Path("ca.pem"), "LDAPTLS_REQCERT=demand")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	names := startEdge(t, Config{Origins: OriginList(sl.Addr), ProxyProtocol: ProxyOff, TLSGate: TLSGate{ServerNames: []string{served}, HelloTimeout: 30 * time.Second}})
	on := startEdge(t, Config{Origins: OriginList(sl.Addr), ProxyProtocol: ProxyOff, TLSGate: TLSGate{Mode: GateOn, HelloTimeout: 30 * time.Second}})
	if out, err := search(names, "127.0.0.1"); err == nil {
		t.Fatalf("SNI-less ldapsearch passed server_names:\n%s", out)
	}
	names.waitValue(t, 1, "edgefleet_edge_connections_total", "result", ResultWrongSNI)
	if out, err := search(on, "127.0.0.1"); err != nil || !strings.Contains(out, "dn: "+testbed.Suffix) {
		t.Fatalf("ldapsearch through mode on: %v\n%s", err, out)
	}
	notRefused(t, on, 0)
	t.Run("by name", func(t *testing.T) {
		testbed.NeedRoot(t)
		testbed.Need(t, "unshare")
		hosts := testbed.WriteFile(t, t.TempDir(), "hosts", "127.0.0.1 "+served+"\n")
		script := "mount --bind " + hosts + " /etc/hosts && exec \"$@\""
		out, err := search(names, served, "unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh")
		if err != nil || !strings.Contains(out, "dn: "+testbed.Suffix) {
			t.Fatalf("ldapsearch by name: %v\n%s", err, out)
		}
		notRefused(t, names, 1) // the SNI-less search's refusal only
	})
}

// notRefused checks that te's gate refused no more than the wrong-sni
// ones expected (how a relayed ldapsearch ends, eof or a reset after its
// unbind, depends on timing).
func notRefused(t *testing.T, te *testEdge, wrongSNI float64) {
	t.Helper()
	for _, r := range []string{ResultNotTLS, ResultHelloTimeout, ResultWrongSNI} {
		want := 0.0
		if r == ResultWrongSNI {
			want = wrongSNI
		}
		if v := te.value(t, "edgefleet_edge_connections_total", "result", r); v != want {
			t.Fatalf("%s = %v, want %v", r, v, want)
		}
	}
}

// goHello is the first write of a Go crypto/tls client for serverName.
func goHello(t *testing.T, serverName string) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		tls.Client(client, &tls.Config{ServerName: serverName}).Handshake()
		client.Close()
	}()
	server.SetDeadline(time.Now().Add(30 * time.Second))
	h, err := readClientHello(bufio.NewReader(server))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// padHello adds a padding extension (21) to a one-record hello so that it
// is size bytes.
func padHello(t *testing.T, h []byte, size int) []byte {
	t.Helper()
	pad := size - len(h) - 4
	// The extensions block's length sits after version, random, session
	// id, cipher suites and compression methods.
	at := 5 + 4 + 2 + 32
	at += 1 + int(h[at])
	at += 2 + (int(h[at])<<8 | int(h[at+1]))
	at += 1 + int(h[at])
	out := append([]byte(nil), h...)
	out = append(out, 0, 21, byte(pad>>8), byte(pad))
	out = append(out, make([]byte, pad)...)
	add := func(i, width, d int) {
		v := 0
		for k := range width {
			v = v<<8 | int(out[i+k])
		}
		v += d
		for k := width - 1; k >= 0; k-- {
			out[i+k] = byte(v)
			v >>= 8
		}
	}
	add(3, 2, pad+4)  // record
	add(6, 3, pad+4)  // handshake
	add(at, 2, pad+4) // extensions
	if len(out) != size {
		t.Fatalf("padded to %d, want %d", len(out), size)
	}
	if err := clienthello.Check(out[:min(len(out), clienthello.MaxLen)], nil); size <= clienthello.MaxLen && err != nil {
		t.Fatalf("the padded hello: %v", err)
	}
	return out
}

// TestGateHeaderAndHelloOneSegment: the ClientHello the gate read goes to
// the origin behind the PROXY header in one write: one data segment.
func TestGateHeaderAndHelloOneSegment(t *testing.T) {
	hello := goHello(t, served)
	type got struct {
		hello []byte
		segs  uint32
	}
	arrived := make(chan got, 1)
	o := startOrigin(t, true, func(c originConn) {
		h, err := readClientHello(c.r)
		if err != nil {
			t.Error(err)
		}
		info, err := unix.GetsockoptTCPInfo(fd(t, c.tcp), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			t.Error(err)
		}
		arrived <- got{h, info.Data_segs_in}
	})
	te := gated(t, TLSGate{ServerNames: []string{served}}, o.addr)
	c, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(hello)
	if g := <-arrived; string(g.hello) != string(hello) || g.segs != 1 {
		t.Fatalf("the origin got %d bytes (want the %d of the hello) in %d data segments, want 1", len(g.hello), len(hello), g.segs)
	}
}

// TestGateDefersAccept: with the gate on, the edge's listening socket
// has TCP_DEFER_ACCEPT (the loop is woken when the ClientHello is there;
// TestGateRefusesWhatIsNoHello runs under it: garbage and not-tls are
// refused, and a silent client, completed by the kernel without data
// once the deferral is over, is still hello-timeout); with the gate off
// it has none. A hello sent only after the handshake still passes.
func TestGateDefersAccept(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := &countingListener{Listener: raw}
	serveOrigin(t, origin, true, echo)
	for _, tc := range []struct {
		mode string
		want int
	}{{GateOn, 1}, {GateOff, 0}} {
		t.Run(tc.mode, func(t *testing.T) {
			ln, err := evloop.Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			f, err := ln.(*net.TCPListener).File() // the same socket, to read its options after Serve
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cfg := DefaultConfig()
			cfg.Name, cfg.Listen, cfg.Origins = "edge-test", []string{ln.Addr().String()}, OriginList(origin.Addr().String())
			cfg.TLSGate = TLSGate{Mode: tc.mode, HelloTimeout: 30 * time.Second}
			logs := &testbed.Buffer{}
			reg := prometheus.NewRegistry()
			e, err := New(cfg, slog.New(slog.NewJSONHandler(logs, nil)), reg)
			if err != nil {
				t.Fatal(err)
			}
			te := serveEdgeOn(t, e, reg, logs, ln)
			c, err := net.Dial("tcp", te.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			hello := goHello(t, served)
			c.Write(hello)
			got := make([]byte, len(hello))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != string(hello) {
				t.Fatalf("echoed %d bytes: %v", len(got), err)
			}
			// Serve set its options before this connection was relayed.
			v, err := unix.GetsockoptInt(int(f.Fd()), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT)
			if err != nil {
				t.Fatal(err)
			}
			if v != tc.want {
				t.Fatalf("TCP_DEFER_ACCEPT %d, want %d", v, tc.want)
			}
			f.Close() // the edge's Shutdown must close the last descriptor of the socket
		})
	}
}

// TestFirstReadHoldsAnyHello: the gate's limit is what the loop's first
// read may hold, so no ClientHello the gate accepts is cut by the read.
func TestFirstReadHoldsAnyHello(t *testing.T) {
	if clienthello.MaxLen != evloop.MaxFirst {
		t.Fatalf("clienthello.MaxLen %d, evloop.MaxFirst %d: want them equal", clienthello.MaxLen, evloop.MaxFirst)
	}
}

// TestGateFirstReadGrowth: the first read grows past its small buffer
// (4352 bytes) only for a prefix of a longer ClientHello: garbage, and a
// fake record and handshake header declaring a 16380-byte hello in front
// of filler, are refused on the small buffer without growing it; a
// 4700-byte hello grows it and passes. With the loop's one large buffer
// (MaxGrown 1) held by a client stopped mid-hello, a 4700-byte hello is
// refused as not-tls, saying why, and a small one still passes.
func TestGateFirstReadGrowth(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := &countingListener{Listener: raw}
	serveOrigin(t, origin, true, echo)
	te := startEdge(t, Config{Origins: OriginList(origin.Addr().String()), TLSGate: TLSGate{Mode: GateOn, HelloTimeout: time.Minute}},
		func(e *Edge) { e.shell.Server.Loops, e.shell.Server.MaxGrown = 1, 1 })
	srv := &te.shell.Server
	fake := append([]byte{0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0x3f, 0xfc}, bytes.Repeat([]byte("A"), 4400)...)
	refused(t, te, origin, bytes.Repeat([]byte{0x16}, 10000), false, ResultNotTLS)
	refused(t, te, origin, fake, false, ResultNotTLS)
	if n := srv.Grows(); n != 0 {
		t.Fatalf("refused bursts grew %d first reads", n)
	}

	hello := goHello(t, served)
	pass := func(b []byte) { t.Helper(); echoedThrough(t, te, b) }
	mid := padHello(t, hello, 4700)
	pass(mid)
	if n := srv.Grows(); n != 1 {
		t.Fatalf("a 4700-byte hello grew %d first reads, want 1", n)
	}
	accepted := origin.n.Load()

	holder, err := net.Dial("tcp", te.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	holder.Write(padHello(t, hello, 8000)[:5000]) // and then nothing: the large buffer stays held
	for deadline := time.Now().Add(30 * time.Second); srv.Grows() != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the holder's first read never grew (%d grown)", srv.Grows())
		}
	}
	origin.n.Store(0)
	refused(t, te, origin, mid, false, ResultNotTLS)
	lines := te.waitLines(t, "client refused by the tls gate", 3)
	if e, _ := lines[2]["err"].(string); !strings.Contains(e, evloop.ErrGrowLimit.Error()) || !strings.Contains(e, "over 4352 bytes") {
		t.Fatalf("refusal logged with err %q", e)
	}
	origin.n.Store(accepted)
	pass(hello)
	if n := srv.Grows(); n != 2 {
		t.Fatalf("%d first reads grown, want 2", n)
	}
}
