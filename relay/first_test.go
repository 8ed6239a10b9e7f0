package relay

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHeaderAndFirstBytesOneSegment: client bytes that are there when the
// origin connection is up go out with the PROXY header in one write, so
// the origin receives one data segment (TCP_INFO's tcpi_data_segs_in) and
// the log line still counts them; bytes that come later follow the
// header in a segment of their own.
func TestHeaderAndFirstBytesOneSegment(t *testing.T) {
	type got struct {
		payload string
		segs    uint32
	}
	arrived := make(chan got, 1)
	headerIn := make(chan struct{}, 1)
	o := startOrigin(t, true, func(c originConn) {
		headerIn <- struct{}{}
		b := make([]byte, 5)
		io.ReadFull(c, b)
		info, err := unix.GetsockoptTCPInfo(fd(t, c.tcp), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			t.Error(err)
		}
		arrived <- got{string(b), info.Data_segs_in}
		c.Write([]byte("ok"))
	})
	e := startEdge(t, Config{Origins: OriginList(o.addr)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for i, tc := range []struct {
		name  string
		early bool
		segs  uint32
	}{{"bytes there before the dial", true, 1}, {"bytes after the header", false, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			sc, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			if tc.early {
				io.WriteString(c, "hello")
				waitReadable(t, sc, 5) // in the edge's socket before it dials
			}
			go e.HandleConn(sc)
			<-headerIn
			if !tc.early {
				io.WriteString(c, "hello")
			}
			if g := <-arrived; g.payload != "hello" || g.segs != tc.segs {
				t.Fatalf("origin got %q in %d data segments, want hello in %d", g.payload, g.segs, tc.segs)
			}
			io.ReadFull(c, make([]byte, 2))
			c.Close()
			line := e.waitLines(t, "connection closed", i+1)[i]
			if line["bytes_up"] != float64(5) || line["bytes_down"] != float64(2) {
				t.Fatalf("log line %v, want bytes_up 5, bytes_down 2", line)
			}
		})
	}
}

// fd is c's file descriptor, for getsockopt.
func fd(t *testing.T, c syscall.Conn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	raw.Control(func(f uintptr) { n = int(f) })
	return n
}

// waitReadable waits until c has received n bytes, reading none.
func waitReadable(t *testing.T, c net.Conn, n int) {
	t.Helper()
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	peek := make([]byte, n)
	raw.Read(func(fd uintptr) bool {
		m, _, err := unix.Recvfrom(int(fd), peek, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return err == nil && m >= n
	})
}
