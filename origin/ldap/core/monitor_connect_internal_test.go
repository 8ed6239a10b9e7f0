package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
	"github.com/prometheus/client_golang/prometheus"
)

// fullBacklog is a loopback port whose accept queue is full and never
// drained: a new connect to it gets no SYN-ACK and times out, as a busy
// server's does on a loaded host.
func fullBacklog(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	for range 16 { // the queue holds one or two; the first dial that times out proves it full
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err != nil {
			return port
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatal("the accept queue never filled")
	return 0
}

// A monitor check whose connect times out: a failure when the server was
// silent meanwhile, but inconclusive (errServerBusy) when it was sending
// on other connections — on a loaded host the connect to a working server
// can take longer than the check's bound, and that is no reason to mark it
// down.
func TestCheckConnectTimeoutWhileServerSends(t *testing.T) {
	port := fullBacklog(t)
	f, err := dlp.Parse("m.json", fmt.Appendf(nil, `[
  {"object": "Defaults", "MonitorInterval": 60, "ConnectTimeout": 3},
  {"object": "LdapServer", "name": "L1", "host": "127.0.0.1", "port": %d},
  {"object": "LdapProxy", "name": "ldapConfiguration", "default": ["L1"]}
]`, port))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(DefaultConfig(), f, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	check := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		return s.checkServer(ctx, "L1")
	}

	err = check()
	if err == nil || errors.Is(err, errServerBusy) {
		t.Fatalf("silent server: check returned %v, want a connect failure", err)
	}

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the server answers other connections while the check waits
		defer close(done)
		for {
			s.heard.of("L1").heard()
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	err = check()
	close(stop)
	<-done
	if !errors.Is(err, errServerBusy) {
		t.Fatalf("sending server: check returned %v, want errServerBusy", err)
	}
}
