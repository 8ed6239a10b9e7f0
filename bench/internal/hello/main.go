// Command hello is the load behind docs/benchmarks.md's "wake-ups and
// system calls per connection": short connections that each send a Go
// crypto/tls ClientHello (what the edge's TLS gate waits for), read its
// echo and close, from -c clients; with -serve, the backend instead,
// which reads the PROXY header and echoes. The figures are counted on
// the edge's process while it runs:
//
//	go run ./bench/internal/hello -serve -listen 127.0.0.1:7001 &
//	bin/edge --config edge.yaml &   # listen 127.0.0.1:7000, origin 127.0.0.1:7001, tls_gate on
//	perf stat -e raw_syscalls:sys_enter,context-switches,task-clock -p $(pgrep -n edge) &
//	go run ./bench/internal/hello -edge 127.0.0.1:7000 -n 10000 -c 16; kill -INT %3
package main

import (
	"bufio"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pires/go-proxyproto"
)

func main() {
	edge := flag.String("edge", "127.0.0.1:7000", "the relay to connect to")
	listen := flag.String("listen", "127.0.0.1:7001", "with -serve: the backend's address")
	serve := flag.Bool("serve", false, "run the backend (PROXY header, then echo) instead of the load")
	n := flag.Int("n", 10000, "connections in all")
	clients := flag.Int("c", 16, "concurrent clients")
	name := flag.String("sni", "ldap.example.com", "the ClientHello's server name")
	flag.Parse()
	if *serve {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hello:", err)
			os.Exit(1)
		}
		backend(ln)
		return
	}
	h, err := clientHello(*name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
	took, err := load(*edge, h, *n, *clients)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
	fmt.Printf("%d connections in %v: %.0f per second\n", *n, took.Round(time.Millisecond), float64(*n)/took.Seconds())
}

// clientHello is the first record Go's crypto/tls sends for name.
func clientHello(name string) ([]byte, error) {
	a, b := net.Pipe()
	defer b.Close()
	go func() {
		tls.Client(a, &tls.Config{ServerName: name, InsecureSkipVerify: true}).Handshake()
		a.Close()
	}()
	r := bufio.NewReader(b)
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return append(hdr, body...), nil
}

// load makes n connections from clients goroutines; it stops at the
// first failure.
func load(addr string, h []byte, n, clients int) (time.Duration, error) {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	var once sync.Once
	var failed error
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, len(h))
			for left.Add(-1) >= 0 {
				if err := one(addr, h, buf); err != nil {
					once.Do(func() { failed = err })
					left.Store(0)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), failed
}

func one(addr string, h, buf []byte) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(h); err != nil {
		return err
	}
	_, err = io.ReadFull(c, buf)
	return err
}

// backend reads each connection's PROXY header and echoes the rest,
// until ln fails.
func backend(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "hello:", err)
			return
		}
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			if _, err := proxyproto.Read(r); err != nil {
				return
			}
			io.Copy(c, r)
		}()
	}
}
