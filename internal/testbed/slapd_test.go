package testbed_test

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

func TestSlapdStopStart(t *testing.T) {
	testbed.Need(t, "ldapsearch")
	s := testbed.StartSlapds(t, 1, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(10)})[0]
	search := func() (string, error) {
		out, err := exec.Command("ldapsearch", "-x", "-H", s.URL, "-D", testbed.User("alice"), "-w", "alice-pw",
			"-b", "ou=bulk,"+testbed.Suffix, "-LLL", "1.1").CombinedOutput()
		return string(out), err
	}
	out, err := search()
	if err != nil || strings.Count(out, "dn: ") != 11 {
		t.Fatalf("search: %v\n%s", err, out)
	}
	s.Kill()
	if _, err := search(); err == nil {
		t.Fatal("search succeeded against a killed slapd")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if out, err := search(); err != nil {
		t.Fatalf("search after restart: %v\n%s", err, out)
	}
}

func TestBlackHole(t *testing.T) {
	addr := testbed.BlackHole(t)
	start := time.Now()
	c, err := (&net.Dialer{Timeout: 300 * time.Millisecond}).Dial("tcp", addr)
	if err == nil {
		c.Close()
		t.Fatal("connected to a black hole")
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("dial failed after %v (%v), want a timeout", d, err)
	}
}
