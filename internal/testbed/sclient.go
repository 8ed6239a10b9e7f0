package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// SClient runs openssl s_client against addr, verifying the server with
// caFile and presenting certFile and keyFile, with extra arguments
// (-sess_out FILE to save the session, -sess_in FILE to resume it). It
// keeps s_client's input open until the session summary is printed and,
// with -sess_out, the session written (TLS 1.3 tickets come after the
// handshake), then closes it. out is all s_client printed; err is its exit
// status, or an error when it printed an alert.
func SClient(t testing.TB, addr, caFile, certFile, keyFile string, extra ...string) (out string, err error) {
	t.Helper()
	Need(t, "openssl")
	args := append([]string{"s_client", "-connect", addr, "-CAfile", caFile, "-cert", certFile, "-key", keyFile,
		"-verify_return_error"}, extra...)
	cmd := exec.Command("openssl", args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	guard := time.AfterFunc(5*time.Minute, func() { cmd.Process.Kill() }) // a hang guard
	defer guard.Stop()
	var b strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		b.WriteString(line + "\n")
		if strings.HasPrefix(line, "Verify return code") || strings.HasPrefix(line, "Reused, ") || strings.HasPrefix(line, "New, ") {
			break
		}
	}
	if i := slices.Index(extra, "-sess_out"); i >= 0 && i+1 < len(extra) {
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if fi, err := os.Stat(extra[i+1]); err == nil && fi.Size() > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("openssl s_client wrote no session to %s:\n%s", extra[i+1], b.String())
			}
		}
	}
	stdin.Close()
	io.Copy(&b, stdout)
	err = cmd.Wait()
	b.WriteString(stderr.String())
	switch {
	case err != nil:
		err = fmt.Errorf("openssl s_client: %w", err)
	case strings.Contains(b.String(), " alert "):
		err = errors.New("openssl s_client: an alert")
	}
	return b.String(), err
}
