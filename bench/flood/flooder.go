package main

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// The two floods.
const (
	floodHello = "hello" // replay one captured ClientHello: connect, write it, close
	floodTLS   = "tls"   // full crypto/tls handshakes, X25519, no resumption
)

// flooderArg, first on the command line, runs this program as the flooder.
const flooderArg = "-flooder"

func isFlooder() bool { return len(os.Args) > 1 && os.Args[1] == flooderArg }

// floodStats is what the flooder reports on stdout, as JSON.
type floodStats struct {
	Attempts  int64   `json:"attempts"`  // connections tried
	Completed int64   `json:"completed"` // hello written, or handshake done
	Seconds   float64 `json:"seconds"`
	FirstErr  string  `json:"first_err,omitempty"`
}

// flood is the flooder's plan.
type flood struct {
	mode, target string
	hello        []byte
	sources      int
	rate         int
	workers      int
	max          int64
	d            time.Duration
}

// flooderMain parses the flooder's flags, floods and prints its
// floodStats; it is the exit status.
func flooderMain(args []string) int {
	fs := flag.NewFlagSet("flooder", flag.ContinueOnError)
	f := &flood{}
	var hello string
	fs.StringVar(&f.mode, "mode", floodHello, "hello or tls")
	fs.StringVar(&f.target, "target", "", "ip:port to flood")
	fs.StringVar(&hello, "hello", "", "the ClientHello to replay, hex")
	fs.IntVar(&f.sources, "sources", 64, "source addresses 127.0.2.1, …")
	fs.IntVar(&f.rate, "rate", 0, "connections per second (0: flat out)")
	fs.IntVar(&f.workers, "workers", 64, "concurrent connections")
	fs.Int64Var(&f.max, "max", 200000, "connections at most")
	fs.DurationVar(&f.d, "d", 10*time.Second, "time at most")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if f.hello, err = hex.DecodeString(hello); err != nil {
		fmt.Fprintln(os.Stderr, "flooder: -hello:", err)
		return 2
	}
	st := f.run()
	json.NewEncoder(os.Stdout).Encode(st)
	return 0
}

// run floods until max connections or d have passed.
func (f *flood) run() floodStats {
	var issued, completed atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	end := start.Add(f.d)
	var wg sync.WaitGroup
	for w := range f.workers {
		wg.Go(func() {
			for k := int64(0); ; k++ {
				n := issued.Add(1)
				if n > f.max || time.Now().After(end) {
					issued.Add(-1)
					return
				}
				if f.rate > 0 { // attempt n is due at start + n/rate
					time.Sleep(time.Until(start.Add(time.Duration(n) * time.Second / time.Duration(f.rate))))
				}
				if err := f.once(net.IPv4(127, 0, 2, byte(1+(int(k)*f.workers+w)%f.sources))); err != nil {
					firstErr.CompareAndSwap(nil, err.Error())
				} else {
					completed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st := floodStats{Attempts: issued.Load(), Completed: completed.Load(), Seconds: time.Since(start).Seconds()}
	if e, ok := firstErr.Load().(string); ok {
		st.FirstErr = e
	}
	return st
}

// once is one flood connection from src.
func (f *flood) once(src net.IP) error {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second, Control: noPort}
	c, err := d.Dial("tcp", f.target)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if f.mode == floodHello {
		_, err = c.Write(f.hello)
		return err
	}
	return tls.Client(c, floodTLSConfig()).Handshake()
}

// floodTLSConfig is the attacker's: X25519 only, no session cache, no
// certificate, nothing verified (verifying only costs the attacker).
func floodTLSConfig() *tls.Config {
	return &tls.Config{ServerName: testbed.ServerName, InsecureSkipVerify: true,
		CurvePreferences: []tls.CurveID{tls.X25519}, SessionTicketsDisabled: true}
}

// captureHello is the first TLS record a crypto/tls client with the
// flood's configuration sends (its ClientHello), in hex: what the hello
// flood replays.
func captureHello(dir string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	go func() {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		tls.Client(c, floodTLSConfig()).Handshake() // fails: nobody answers
	}()
	c, err := ln.Accept()
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var hdr [5]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return "", err
	}
	if hdr[0] != 22 {
		return "", fmt.Errorf("first record has type %d, not handshake (22)", hdr[0])
	}
	body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
	if _, err := io.ReadFull(c, body); err != nil {
		return "", err
	}
	hello := hex.EncodeToString(append(hdr[:], body...))
	return hello, os.WriteFile(dir+"/clienthello.hex", []byte(hello+"\n"), 0o600)
}

// startFlood runs the flooder pinned to -flood-cpu with GOMAXPROCS=1 at
// target for at most d; wait collects its stats.
func startFlood(mode, target, hello string, d time.Duration) (wait func() (floodStats, error), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("taskset", "-c", *floodCPU, self, flooderArg, "-mode", mode, "-target", target,
		"-hello", hello, "-sources", strconv.Itoa(*floodSources), "-rate", strconv.Itoa(*floodRate),
		"-workers", strconv.Itoa(*floodWorkers), "-max", strconv.Itoa(*floodMax), "-d", d.String())
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("flooder: %w", err)
	}
	return func() (floodStats, error) {
		var st floodStats
		if err := cmd.Wait(); err != nil {
			return st, fmt.Errorf("flooder: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
		}
		err := json.Unmarshal(stdout.Bytes(), &st)
		return st, err
	}, nil
}
