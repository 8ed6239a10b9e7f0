package benchkit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// FreeAddr is a loopback address nothing listens on right now.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// WaitTCP waits until addr accepts a connection, for at most within.
func WaitTCP(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not accepting after %v: %w", addr, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Serve listens on loopback and runs handle for every connection, in its
// own goroutine, until the process ends. It returns the address.
func Serve(handle func(net.Conn)) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond) // EMFILE and the like
				continue
			}
			go handle(c)
		}
	}()
	return ln.Addr().String(), nil
}

var sinkBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// SinkOrEcho serves the far end of every measurement on c, reading from r
// (c itself, or a reader that has consumed a PROXY header): the first
// byte decides. 'S' is a sink that answers the count of the bytes after
// it, as 8 big-endian bytes, at EOF; anything else is echoed and the
// connection held until the client closes. It closes c.
func SinkOrEcho(c net.Conn, r io.Reader) {
	defer c.Close()
	var first [1]byte
	if _, err := io.ReadFull(r, first[:]); err != nil {
		return
	}
	if first[0] != 'S' {
		c.Write(first[:])
		io.Copy(io.Discard, r)
		return
	}
	bp := sinkBufs.Get().(*[]byte)
	defer sinkBufs.Put(bp)
	var n int64
	for {
		m, err := r.Read(*bp)
		n += int64(m)
		if err != nil {
			break
		}
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	c.Write(b[:])
}

// Throughput dials, sends header, the sink's 'S' and then n-1 bytes more,
// or as many as d allows, and returns the bytes per second from the dial
// to the sink's answer, and how many bytes that was.
func Throughput(dial func() (net.Conn, error), header []byte, n int64, d time.Duration) (float64, int64, error) {
	buf := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{7})
	rng.Read(buf)
	t0 := time.Now()
	c, err := dial()
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	if _, err := c.Write(append(slices.Clip(header), 'S')); err != nil {
		return 0, 0, err
	}
	sent := int64(1)
	for sent < n && time.Since(t0) < d {
		m, err := c.Write(buf[:min(int64(len(buf)), n-sent)])
		sent += int64(m)
		if err != nil {
			return 0, 0, err
		}
	}
	c.(*net.TCPConn).CloseWrite()
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, 0, fmt.Errorf("sink answer: %w", err)
	}
	if got := int64(binary.BigEndian.Uint64(b[:])); got != sent-1 {
		return 0, 0, fmt.Errorf("sink received %d bytes, want %d", got, sent-1)
	}
	return float64(sent) / time.Since(t0).Seconds(), sent, nil
}

// EchoOnce dials, sends msg and waits for the one-byte echo.
func EchoOnce(dial func() (net.Conn, error), msg []byte) error {
	c, err := dial()
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		return err
	}
	var r [1]byte
	_, err = io.ReadFull(c, r[:])
	return err
}

// Rate is what ConnRate measured.
type Rate struct {
	OK       int // connections that succeeded
	Failed   int
	Rate     float64 // successful connections per second
	P50, P99 time.Duration
}

// ConnRate runs clients loops of once until max calls or d have passed.
func ConnRate(clients, max int, d time.Duration, once func() error) Rate {
	var issued, failed atomic.Int64
	deadline := time.Now().Add(d)
	lats := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range clients {
		wg.Go(func() {
			for issued.Add(1) <= int64(max) && time.Now().Before(deadline) {
				s := time.Now()
				if err := once(); err != nil {
					failed.Add(1)
					continue
				}
				lats[i] = append(lats[i], time.Since(s))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	all := slices.Concat(lats...)
	slices.Sort(all)
	r := Rate{Failed: int(failed.Load()), OK: len(all)}
	if len(all) > 0 {
		r.Rate = float64(len(all)) / elapsed.Seconds()
		r.P50 = all[len(all)/2]
		r.P99 = all[len(all)*99/100]
	}
	return r
}

// Hold opens n connections with 32 clients, each sending msg() and
// reading a one-byte echo, and keeps them open. conns has a nil for each
// that failed; ok counts the others.
func Hold(n int, dial func() (net.Conn, error), msg func() []byte) (conns []net.Conn, ok int) {
	conns = make([]net.Conn, n)
	var wg sync.WaitGroup
	var opened, next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				c, err := dial()
				if err != nil {
					continue
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				var b [1]byte
				if _, err := c.Write(msg()); err != nil {
					c.Close()
					continue
				}
				if _, err := io.ReadFull(c, b[:]); err != nil {
					c.Close()
					continue
				}
				c.SetDeadline(time.Time{})
				conns[i] = c
				opened.Add(1)
			}
		})
	}
	wg.Wait()
	return conns, int(opened.Load())
}

// CloseAll closes the connections Hold opened.
func CloseAll(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}
