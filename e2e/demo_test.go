package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/edgefleet/internal/testbed"
)

// TestDemo runs scripts/demo.sh as `make demo` does, non-interactively
// (DEMO_EXIT=1, stdin not a terminal) on a port base of its own, and checks
// the story's key lines: the ranking puts the black hole last, failed; the
// core's line shows claimed (the agent, 127.0.0.10) and measured (the
// edge's source) as two different addresses; fleet rotate removed the
// agent's edge from DNS; the watcher moved the agent to another edge and
// its next search was measured from there; fleet status shows the black
// hole failed; the script exits 0 and leaves nothing listening.
func TestDemo(t *testing.T) {
	testbed.Need(t, "slapd", "slapadd", "ldapsearch", "openssl")
	bin := buildBinaries(t)
	base := demoPortBase(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot(t), "scripts", "demo.sh"))
	cmd.Env = append(os.Environ(), "BIN="+bin, "DEMO_EXIT=1", "DEMO_PORT_BASE="+strconv.Itoa(base))
	cmd.Stdin = nil // /dev/null: not a terminal
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	story := string(out)
	if err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, story)
	}
	t.Logf("demo output:\n%s", story)
	edgePort := strconv.Itoa(base + 8)

	// The ranking: two edges answer; the black hole (edge-c, 127.0.0.4)
	// is last, failed within the budget.
	table := between(t, story, "== the agent (127.0.0.10) ranks the edges", "ranking took")
	var rows []string
	for _, l := range strings.Split(table, "\n") {
		if strings.Contains(l, ":"+edgePort+" ") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 3 || !strings.Contains(rows[2], "127.0.0.4:"+edgePort) || !regexp.MustCompile(`\sfalse\s.*no answer within`).MatchString(rows[2]) {
		t.Errorf("ranking rows %q: want 3, the black hole 127.0.0.4 last and failed", rows)
	}
	for _, r := range rows[:min(2, len(rows))] {
		if !regexp.MustCompile(`\strue\s`).MatchString(r) {
			t.Errorf("ranking row %q: want an edge that answered", r)
		}
	}
	first := match(t, story, `the agent's choice: (127\.0\.0\.[23]):`+edgePort)

	// Claimed vs measured on the core's line: the agent, and the edge.
	claimed := match(t, story, `(?m)^claimed  (127\.0\.0\.10):\d+ `)
	measured := match(t, story, `(?m)^measured (127\.0\.0\.\d+):\d+ `)
	if claimed == measured || measured != first {
		t.Errorf("claimed %s, measured %s: want the agent 127.0.0.10 and the chosen edge %s", claimed, measured, first)
	}
	if !regexp.MustCompile(`msg="ldap op" id=\S+ claimed=127\.0\.0\.10:\d+ measured=` + regexp.QuoteMeta(first) + `:\d+ edge=edge-[ab] .* op=bind .*result=success`).MatchString(story) {
		t.Errorf("no core line for the agent's bind with claimed 127.0.0.10 and measured %s", first)
	}

	// The rotation took the agent's edge out of DNS, edge-d in.
	for _, want := range []string{
		"step 2/6 probe: edge-d 127.0.0.5:" + edgePort + " ok",
		"step 3/6 dns: add A 127.0.0.5 (edge-d), read back",
		"step 4/6 dns: remove A " + first + " (",
		"step 5/6 drain: ",
	} {
		if !strings.Contains(story, want) {
			t.Errorf("the rotation lacks %q", want)
		}
	}
	after := between(t, story, "rotation took", "== the agent moves")
	if strings.Contains(after, "IN\tA\t"+first+"\n") || !strings.Contains(after, "IN\tA\t127.0.0.5\n") {
		t.Errorf("DNS after the rotation:\n%s\nwant 127.0.0.5 in, %s out", after, first)
	}

	// The agent moved: the watcher's event, and the next search measured
	// from the new edge.
	from := match(t, story, `(?:better-edge|edge-left): (127\.0\.0\.\d+):`+edgePort+` \(`)
	to := match(t, story, `(?:better-edge|edge-left): 127\.0\.0\.\d+:`+edgePort+` \([^)]*\) -> (127\.0\.0\.\d+):`+edgePort)
	now := match(t, story, `measured is now (127\.0\.0\.\d+):\d+ \(was `)
	if from != first || to == first || to == "127.0.0.4" || now != to {
		t.Errorf("moved from %s to %s, next search measured %s: want from %s to a live edge, measured there", from, to, now, first)
	}
	if !strings.Contains(story, "LDAPSOCKET_BIND_ADDRESSES=127.0.0.10 ldapsearch -H ldaps://"+to+":"+edgePort) {
		t.Errorf("the ldapsearch line to try by hand is missing or not through %s", to)
	}

	// fleet watch withdrew the black hole: out of DNS, still listed, and
	// fleet status says so.
	for _, want := range []string{`msg=withdraw edge=edge-c reason="3 failed checks"`, "step 4/6 dns: remove A 127.0.0.4 (edge-c), read back", "edge-c withdrawn by fleet watch "} {
		if !strings.Contains(story, want) {
			t.Errorf("the demo's fleet watch lacks %q", want)
		}
	}
	if after := between(t, story, "edge-c withdrawn by fleet watch", "== the fleet at a glance"); strings.Contains(after, "IN\tA\t127.0.0.4\n") {
		t.Errorf("DNS after fleet watch still has edge-c:\n%s", after)
	}
	if !regexp.MustCompile(`(?m)^edge-c\s+127\.0\.0\.4\s+no\s.*no answer within.*\swithdrawn$`).MatchString(story) {
		t.Errorf("fleet status does not show edge-c (127.0.0.4) out of DNS and withdrawn")
	}

	// Nothing is left behind.
	for _, addr := range []string{fmt.Sprintf("127.0.0.1:%d", base+5), "127.0.0.2:" + edgePort, "127.0.0.5:" + edgePort} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts after the demo ended", addr)
		}
	}
}

// between is the part of s from the line containing start to the one
// containing end.
func between(t *testing.T, s, start, end string) string {
	t.Helper()
	i := strings.Index(s, start)
	j := strings.Index(s[max(i, 0):], end)
	if i < 0 || j < 0 {
		t.Fatalf("the demo's output lacks %q … %q", start, end)
	}
	return s[i : i+j]
}

// match returns the first group of re in s.
func match(t *testing.T, s, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		t.Errorf("the demo's output has no line matching %s", re)
		return ""
	}
	return m[1]
}

// repoRoot is the module's root directory (this package is one below it).
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// buildBinaries builds the four binaries once per test run into one
// directory, as make build does into bin/ (TestMain removes it).
func buildBinaries(t *testing.T) string {
	t.Helper()
	var dir string
	for _, cmd := range []string{"edge", "origin", "probe", "fleet"} {
		dir = filepath.Dir(testbed.Build(t, "github.com/edgefleet/edgefleet/cmd/"+cmd))
	}
	return dir
}

// demoPortBase finds a base whose ports the demo uses are free: BASE+1 …
// BASE+10 on 127.0.0.1 (TCP, and UDP for the DNS server at BASE+10), the
// edges' BASE+8 and BASE+9 on 127.0.0.2 … 127.0.0.5. Below the ephemeral
// range, so no outgoing connection takes one meanwhile.
func demoPortBase(t *testing.T) int {
	t.Helper()
	for range 100 {
		base := 20000 + 16*rand.IntN(700)
		if portsFree(base) {
			return base
		}
	}
	t.Fatal("no free port base for the demo in 20000-31200")
	return 0
}

func portsFree(base int) bool {
	var addrs []string
	for i := 1; i <= 10; i++ {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", base+i))
	}
	for ip := 2; ip <= 5; ip++ {
		addrs = append(addrs, fmt.Sprintf("127.0.0.%d:%d", ip, base+8), fmt.Sprintf("127.0.0.%d:%d", ip, base+9))
	}
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return false
		}
		ln.Close()
	}
	pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", base+10))
	if err != nil {
		return false
	}
	pc.Close()
	return true
}

// TestDemoInterrupt: a Ctrl-C (SIGINT to the script's process group, as a
// terminal sends it) while the demo waits for a slapd to accept stops it
// at once with status 130: no false "not accepting connections" once the
// wait would have run out, and its temporary directory removed. LDAP1's
// port is held by a listening socket whose accept queue is full, so
// slapd cannot take it and a connect there hangs: the Ctrl-C lands in
// the wait's connect (before, its subshell ran the INT trap itself, and
// the script went on as if LDAP1 had answered).
func TestDemoInterrupt(t *testing.T) {
	testbed.Need(t, "slapd", "slapadd", "ldapsearch", "openssl")
	bin := buildBinaries(t)
	base := demoPortBase(t)
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: base + 1, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	ldap1 := fmt.Sprintf("127.0.0.1:%d", base+1)
	for range 3 { // fill the accept queue, never accepted
		go func() {
			if c, err := net.DialTimeout("tcp", ldap1, 5*time.Second); err == nil {
				t.Cleanup(func() { c.Close() })
			}
		}()
	}
	waitUntil := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", ldap1, 300*time.Millisecond)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			break // a connect there hangs now
		}
		if err == nil {
			c.Close()
		}
		if time.Now().After(waitUntil) {
			t.Fatalf("a connect to the full listener does not hang: %v", err)
		}
	}
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot(t), "scripts", "demo.sh"))
	cmd.Env = append(os.Environ(), "BIN="+bin, "DEMO_EXIT=1", "DEMO_PORT_BASE="+strconv.Itoa(base), "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The last slapd's log is made right before the waits begin.
	deadline := time.Now().Add(time.Minute)
	for {
		logs, _ := filepath.Glob(filepath.Join(tmp, "edgefleet-demo.*", "ldap3", "log"))
		if len(logs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
			t.Fatalf("the demo did not start its slapds within a minute:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // inside wait_tcp for LDAP1
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("demo.sh after Ctrl-C: %v, want exit status 130", err)
	}
	if strings.Contains(out.String(), "not accepting connections") {
		t.Errorf("the Ctrl-C waited for the wait to run out:\n%s", out.String())
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("left behind after Ctrl-C: %v", left)
	}
}
