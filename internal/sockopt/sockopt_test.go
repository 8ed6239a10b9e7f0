package sockopt

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestKeepalive sets keepalive on a listening socket and checks what an
// accepted socket inherits, then sets it on the connection itself.
func TestKeepalive(t *testing.T) {
	every7 := Keepalive{Idle: 7 * time.Second, Interval: 7 * time.Second, Count: 4}
	for _, tc := range []struct {
		name          string
		ka            Keepalive
		goDefault     bool // listener from net.Listen: Go sets its own keepalive per connection
		wantInherited bool
	}{
		{"inherited", every7, false, true},
		{"inherited, Go's default", Keepalive{Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}, false, true},
		{"inherited off", Keepalive{}, false, true},
		{"Go's default wins", every7, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc := net.ListenConfig{KeepAlive: -1}
			if tc.goDefault {
				lc.KeepAlive = 0
			}
			ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			if err := tc.ka.Set(ln); err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := tc.ka.Has(s); got != tc.wantInherited {
				t.Fatalf("inherited = %v, want %v", got, tc.wantInherited)
			}
			if err := tc.ka.Set(s); err != nil || !tc.ka.Has(s) {
				t.Fatalf("set on the connection: %v, has = %v", err, tc.ka.Has(s))
			}
		})
	}
}

// TestNotASocket: what is not a socket is refused, never reported as set.
func TestNotASocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if err := (Keepalive{}).Set(a); err == nil {
		t.Fatal("Set on a pipe: no error")
	}
	if (Keepalive{}).Has(a) {
		t.Fatal("Has on a pipe: true")
	}
}
