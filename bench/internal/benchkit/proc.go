package benchkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/internal/sbin"
)

// TempDir makes the directory for the configs and logs of bench/name.
// cleanup removes it unless keep is set, in which case its path is
// printed to stderr; Main removes it too if the program is interrupted
// (SIGTERM, SIGINT) before cleanup ran.
func TempDir(name string, keep bool) (dir string, cleanup func(), err error) {
	dir, err = os.MkdirTemp("", "bench-"+name+"-")
	if err != nil {
		return "", nil, err
	}
	if keep {
		fmt.Fprintln(os.Stderr, "bench/"+name+": files in", dir)
		return dir, func() {}, nil
	}
	return dir, undoLater(func() { os.RemoveAll(dir) }), nil
}

// WriteConfig writes body to dir/name and returns its path.
func WriteConfig(dir, name, body string) (string, error) {
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, []byte(body), 0o600)
}

// Start runs bin with args, its stdout and stderr going to dir/name.log;
// the process dies with this one, and gets SIGTERM when this one is
// interrupted (Main).
func Start(dir, name, bin string, args ...string) (*exec.Cmd, error) {
	return start(dir, name, nil, bin, args...)
}

// start is Start with env added to this process's environment.
func start(dir, name string, env []string, bin string, args ...string) (*exec.Cmd, error) {
	path, err := LookPath(bin)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return cmd, err
	}
	started(cmd)
	return cmd, nil
}

// Stop sends each started process SIGTERM and kills it if it has not
// exited within 3 seconds.
func Stop(cmds []*exec.Cmd) {
	for _, p := range cmds {
		stopped(p)
		p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
}

// LookPath is sbin.LookPath with a hint for what is missing.
func LookPath(b string) (string, error) {
	p, err := sbin.LookPath(b)
	if err != nil {
		return "", fmt.Errorf("%w (make build; make deps)", err)
	}
	return p, nil
}

// RaiseNofile lifts the soft RLIMIT_NOFILE to the hard limit (at most
// 20,000 on these machines) and returns the new soft limit; processes
// started later inherit it.
func RaiseNofile() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	rl.Cur = rl.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	return rl.Cur
}
