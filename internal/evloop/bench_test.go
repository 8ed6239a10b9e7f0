package evloop

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// BenchmarkShortConns relays short connections (connect, one byte, its
// echo, close) from 1 and from 16 concurrent clients through 1, 2, 4 and 8 loops,
// on one shared listening socket (net.Listen) and on a socket per loop
// (Listen, SO_REUSEPORT), and reports per 100 connections the loops'
// wake-ups from Go's poller and the empty ones among them (nothing to
// do: another loop took the event), the rate and the process's CPU per
// connection (the clients' and the echo backend's included). Everything runs in this process on the same
// CPUs: compare contenders of one run only.
//
//	go test -run - -bench ShortConns -benchtime 20000x ./internal/evloop/
func BenchmarkShortConns(b *testing.B) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	target := netip.MustParseAddrPort(up.Addr().String())
	type contender struct {
		clients, loops int
		shards         bool
	}
	var all []contender
	for _, clients := range []int{1, 16} {
		for _, loops := range []int{1, 2, 4, 8} {
			all = append(all, contender{clients, loops, false}, contender{clients, loops, true})
		}
	}
	// Both orders in one run: the machine's load drifts.
	for pass := range 2 {
		for i := range all {
			c := all[i]
			if pass == 1 {
				c = all[len(all)-1-i]
			}
			kind := "shared"
			if c.shards {
				kind = "reuseport"
			}
			b.Run(fmt.Sprintf("pass=%d/clients=%d/loops=%d/%s", pass+1, c.clients, c.loops, kind), func(b *testing.B) {
				benchShort(b, target, c.clients, c.loops, c.shards)
			})
		}
	}
}

func benchShort(b *testing.B, target netip.AddrPort, clients, loops int, shards bool) {
	listen := func(a string) (net.Listener, error) { return net.Listen("tcp", a) }
	if shards {
		listen = Listen
	}
	ln, err := listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	r := newRelay(target.String())
	r.results = make(chan Result, 1<<16)
	go func() {
		for range r.results {
		}
	}()
	s := &Server{Handler: r, Loops: loops}
	addr := ln.Addr().String()
	go s.Serve(ln)
	defer s.Stop()
	work := make(chan struct{}, b.N)
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	var wg sync.WaitGroup
	b.ResetTimer()
	start, cpu := time.Now(), processCPU()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1)
			for range work {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Error(err)
					return
				}
				c.Write([]byte{'x'})
				io.ReadFull(c, buf)
				c.Close()
			}
		}()
	}
	wg.Wait()
	took, cpuUsed := time.Since(start), processCPU()-cpu
	b.StopTimer()
	accepted := loopCounts(b, s)
	na, wakes, empty := 0, 0, 0
	for i, l := range s.loops {
		done := make(chan [2]int, 1)
		l.post(func() { done <- [2]int{l.wakes, l.empty} })
		v := <-done
		na, wakes, empty = na+accepted[i], wakes+v[0], empty+v[1]
	}
	b.ReportMetric(100*float64(empty)/float64(na), "empty/100conn")
	b.ReportMetric(100*float64(wakes)/float64(na), "wakeups/100conn")
	b.ReportMetric(float64(b.N)/took.Seconds(), "conn/s")
	b.ReportMetric(float64(cpuUsed.Microseconds())/float64(b.N), "cpu-µs/conn")
}
