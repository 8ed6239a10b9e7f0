package benchkit

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cgroup is a CPU-capped control group of the highest CPU weight the
// benchmark made for one relay process: cgroup v2 (cpu.max) when a v2 hierarchy offers the cpu
// controller, else the v1 cpu hierarchy (cpu.cfs_quota_us), which is what
// hybrid hosts such as the development VM have.
type cgroup struct {
	dir    string
	v2     bool
	forget func() // removes it if still there, and drops it from what an interrupt undoes
}

// cgroupPeriod is the quota's period, in µs (the kernel's default).
const cgroupPeriod = 100000

// cpuHierarchy finds where a cpu-capable cgroup hierarchy is mounted.
func cpuHierarchy() (root string, v2 bool, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	var v1root string
	var v2seen []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// mount-id parent major:minor root mount-point options ... - fstype source super-options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if !ok || len(pf) < 5 || len(qf) < 3 {
			continue
		}
		switch mnt := pf[4]; qf[0] {
		case "cgroup2":
			b, _ := os.ReadFile(filepath.Join(mnt, "cgroup.controllers"))
			if slices.Contains(strings.Fields(string(b)), "cpu") {
				return mnt, true, nil
			}
			v2seen = append(v2seen, mnt)
		case "cgroup":
			if slices.Contains(strings.Split(qf[2], ","), "cpu") && v1root == "" {
				v1root = mnt
			}
		}
	}
	if v1root != "" {
		return v1root, false, nil
	}
	why := "no cgroup v2 hierarchy is mounted"
	if len(v2seen) > 0 {
		why = fmt.Sprintf("the cgroup v2 hierarchy at %s does not offer the cpu controller (cgroup.controllers)", strings.Join(v2seen, ", "))
	}
	return "", false, fmt.Errorf("capping the relays' CPU needs the cgroup cpu controller: %s and no cgroup v1 cpu hierarchy is mounted (/proc/self/mountinfo); -cap 0 runs the cheap-VM shape without the cap", why)
}

// newCgroup makes a cgroup capped at pct percent of one CPU.
func newCgroup(name string, pct int) (*cgroup, error) {
	root, v2, err := cpuHierarchy()
	if err != nil {
		return nil, err
	}
	g := &cgroup{dir: filepath.Join(root, fmt.Sprintf("edgefleet-bench-%s-%d", name, os.Getpid())), v2: v2}
	if v2 {
		sub := filepath.Join(root, "cgroup.subtree_control")
		b, _ := os.ReadFile(sub)
		if !slices.Contains(strings.Fields(string(b)), "cpu") {
			if err := os.WriteFile(sub, []byte("+cpu"), 0); err != nil {
				return nil, fmt.Errorf("enabling the cpu controller in %s: %w (needs root, and no process in that cgroup itself)", sub, err)
			}
		}
	}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, fmt.Errorf("making the relay's cgroup: %w (needs root or a delegated cgroup)", err)
	}
	g.forget = undoLater(func() { g.remove() })
	// The quota, and the highest weight: other work on a shared machine
	// then does not take the relay's CPU from it below the quota, as on a
	// VM of its own.
	quota := strconv.Itoa(pct * cgroupPeriod / 100)
	if v2 {
		if err = g.write("cpu.max", quota+" "+strconv.Itoa(cgroupPeriod)); err == nil {
			err = g.write("cpu.weight", "10000")
		}
	} else if err = g.write("cpu.cfs_period_us", strconv.Itoa(cgroupPeriod)); err == nil {
		if err = g.write("cpu.cfs_quota_us", quota); err == nil {
			err = g.write("cpu.shares", "262144")
		}
	}
	if err != nil {
		g.forget()
		return nil, err
	}
	return g, nil
}

func (g *cgroup) write(file, value string) error {
	if err := os.WriteFile(filepath.Join(g.dir, file), []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	return nil
}

// add moves every thread of pid into g.
func (g *cgroup) add(pid int) error { return g.write("cgroup.procs", strconv.Itoa(pid)) }

// quota is how the cap reads in the cgroup's own files.
func (g *cgroup) quota() string {
	if g.v2 {
		b, _ := os.ReadFile(filepath.Join(g.dir, "cpu.max"))
		w, _ := os.ReadFile(filepath.Join(g.dir, "cpu.weight"))
		return "cgroup v2 cpu.max " + strings.TrimSpace(string(b)) + ", cpu.weight " + strings.TrimSpace(string(w))
	}
	q, _ := os.ReadFile(filepath.Join(g.dir, "cpu.cfs_quota_us"))
	p, _ := os.ReadFile(filepath.Join(g.dir, "cpu.cfs_period_us"))
	w, _ := os.ReadFile(filepath.Join(g.dir, "cpu.shares"))
	return fmt.Sprintf("cgroup v1 cpu.cfs_quota_us %s per cpu.cfs_period_us %s, cpu.shares %s", strings.TrimSpace(string(q)), strings.TrimSpace(string(p)), strings.TrimSpace(string(w)))
}

// periods reads cpu.stat: the quota periods that elapsed and those in
// which the group was throttled (the same keys in v1 and v2).
func (g *cgroup) periods() (n, throttled int64) {
	b, _ := os.ReadFile(filepath.Join(g.dir, "cpu.stat"))
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		x, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "nr_periods":
			n = x
		case "nr_throttled":
			throttled = x
		}
	}
	return n, throttled
}

// remove deletes g; its processes must have exited (Stop), and the kernel
// may take a moment to let go of them.
func (g *cgroup) remove() error {
	var err error
	for range 50 {
		if err = syscall.Rmdir(g.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("removing %s: %w", g.dir, err)
}

// capped is the cgroup of each relay process a Shape capped, by pid, so
// MeasureRate can read how often the cap bit.
var capped = struct {
	sync.Mutex
	m map[int]*cgroup
}{m: map[int]*cgroup{}}

// throttledPeriods is cpu.stat's nr_periods and nr_throttled for pid's
// cgroup, zeros for a process no Shape capped.
func throttledPeriods(pid int) (n, throttled int64) {
	capped.Lock()
	g := capped.m[pid]
	capped.Unlock()
	if g == nil {
		return 0, 0
	}
	return g.periods()
}
