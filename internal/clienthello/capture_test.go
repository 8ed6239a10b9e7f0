package clienthello

import (
	"crypto/tls"
	"errors"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// goHello is the first write of a Go crypto/tls client (TLS 1.2 and 1.3
// offered, the default key shares) asking for serverName ("" sends no
// SNI), captured over a net.Pipe.
func goHello(t testing.TB, serverName string) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	cfg := &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == "", MinVersion: tls.VersionTLS12}
	go func() {
		tls.Client(client, cfg).Handshake() // fails when the pipe closes
		client.Close()
	}()
	server.SetDeadline(time.Now().Add(30 * time.Second))
	return readHello(t, server)
}

// opensslHello is the ClientHello of openssl s_client with args (e.g.
// -servername NAME, -noservername), captured on a loopback listener.
func opensslHello(t testing.TB, args ...string) []byte {
	t.Helper()
	testbed.Need(t, "openssl")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command("openssl", append([]string{"s_client", "-connect", ln.Addr().String()}, args...)...)
	if err := cmd.Start(); err != nil { // stdin is /dev/null: it gives up once the hello is refused
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return readHello(t, c)
}

// readHello reads until Check has a verdict other than ErrMore.
func readHello(t testing.TB, c net.Conn) []byte {
	t.Helper()
	var b []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		b = append(b, buf[:n]...)
		if !errors.Is(Check(b, nil), ErrMore) {
			return b
		}
		if err != nil {
			t.Fatalf("reading a ClientHello: %v after %d bytes", err, len(b))
		}
	}
}
