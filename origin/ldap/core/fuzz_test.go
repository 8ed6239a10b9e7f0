package core_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/core"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
)

// FuzzSession feeds arbitrary client bytes to a session whose only server
// is down: whatever arrives, the core answers or disconnects, and never
// panics or hangs.
func FuzzSession(f *testing.F) {
	f.Add(wire.BindRequest(1, "uid=alice,ou=people,dc=example,dc=com", []byte("pw")))
	f.Add(append(wire.BindRequest(1, "", nil), searchPDU(2, "dc=example,dc=com")...))
	f.Add(append(searchPDU(3, ""), 0x30, 0x06, 0x02, 0x01, 0x04, 0x50, 0x01, 0x03))
	f.Add(wire.UnbindRequest(9))
	f.Add([]byte{0x30, 0x80, 0x02, 0x01, 0x01})
	f.Add([]byte("\x16\x03\x01garbage"))
	src := dlpFile(1, 60, []server{{"L1", "127.0.0.1:1", false}}, proxy(nil, []string{"L1"}))
	file, err := dlp.Parse("ldap_proxy.json", []byte(src))
	if err != nil {
		f.Fatal(err)
	}
	srv, err := core.New(core.DefaultConfig(), file, nil, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() { srv.HandleConn(server); close(done) }()
		go io.Copy(io.Discard, client)
		go func() {
			client.Write(data)
			client.Close()
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("session still running 10 s after the client closed")
		}
	})
}
