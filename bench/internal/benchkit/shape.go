package benchkit

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Shape is how the relays and the load side (this process: the clients
// and the backends) share the machine's CPUs while a benchmark measures
// them (docs/benchmarks.md, "Two shapes"):
//   - shared: everything floats over every CPU and each relay runs with
//     its default thread count, as on a development machine;
//   - cheap-vm: each relay alone on RelayCPU with one thread (the edge
//     and the origin GOMAXPROCS=1, HAProxy nbthread 1, nginx one worker)
//     and capped at CapPct percent of that CPU by a cgroup, this process
//     on LoadCPU, as on the one-vCPU VMs edges run on; the cap makes the
//     relay, not the load side, what runs out.
type Shape struct {
	Name     string
	RelayCPU int // -1 in the shared shape
	LoadCPU  int
	CapPct   int // 0: no cap
	groups   []*cgroup
	quota    string // the cap as the cgroup's files read, once a relay is capped
}

// ShapeFlags defines -shapes, -relay-cpu, -load-cpu and -cap; the func it
// returns, called after flag.Parse, makes the shapes they name, in order.
func ShapeFlags() func() ([]*Shape, error) {
	list := flag.String("shapes", "shared,cheap-vm", "comma-separated shapes to measure, in order: shared, cheap-vm (docs/benchmarks.md)")
	relay := flag.Int("relay-cpu", 1, "cheap-vm: the CPU each relay runs alone on (taskset)")
	load := flag.Int("load-cpu", 0, "cheap-vm: the CPU of the clients and backends (this process)")
	capPct := flag.Int("cap", 50, "cheap-vm: each relay's CPU quota, percent of its CPU (a cgroup; 0: no cap)")
	return func() ([]*Shape, error) {
		var shapes []*Shape
		for _, name := range strings.Split(*list, ",") {
			s := &Shape{Name: strings.TrimSpace(name), RelayCPU: -1}
			switch s.Name {
			case "shared":
			case "cheap-vm":
				if n := runtime.NumCPU(); *relay == *load || *relay >= n || *load >= n || *relay < 0 || *load < 0 {
					return nil, fmt.Errorf("cheap-vm: -relay-cpu %d and -load-cpu %d must be two different CPUs of the %d here", *relay, *load, n)
				}
				if *capPct < 0 || *capPct > 100 {
					return nil, fmt.Errorf("cheap-vm: -cap %d is not a percentage", *capPct)
				}
				s.RelayCPU, s.LoadCPU, s.CapPct = *relay, *load, *capPct
				if s.CapPct > 0 {
					if _, _, err := cpuHierarchy(); err != nil { // before anything is started
						return nil, err
					}
				}
			default:
				return nil, fmt.Errorf("unknown shape %q (shared, cheap-vm)", s.Name)
			}
			shapes = append(shapes, s)
		}
		return shapes, nil
	}
}

// Pinned reports whether s pins the relays (cheap-vm).
func (s *Shape) Pinned() bool { return s.RelayCPU >= 0 }

// Threads is the thread or worker count a relay is given in s: 1 when
// pinned, 0 (its own default) otherwise.
func (s *Shape) Threads() int {
	if s.Pinned() {
		return 1
	}
	return 0
}

// MinRate is the short-connection rate the relays are held to against
// HAProxy in s (issue 24): 1.2× on the cheap VM, 1.0× shared.
func (s *Shape) MinRate() float64 {
	if s.Pinned() {
		return 1.2
	}
	return 1.0
}

// Enter pins every thread of this process to s.LoadCPU and sets
// GOMAXPROCS to 1 (nothing in the shared shape); leave undoes it.
func (s *Shape) Enter() (leave func(), err error) {
	if !s.Pinned() {
		return func() {}, nil
	}
	var all, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return nil, err
	}
	one.Set(s.LoadCPU)
	prev := runtime.GOMAXPROCS(1)
	if err := pinThreads(&one); err != nil {
		runtime.GOMAXPROCS(prev)
		return nil, fmt.Errorf("pinning the load side to CPU %d: %w", s.LoadCPU, err)
	}
	return func() { pinThreads(&all); runtime.GOMAXPROCS(prev) }, nil
}

// PinProcess pins every thread of this process, and so every process it
// starts from now on (unless taskset places it elsewhere), to cpus, a
// taskset list ("0", "0,1", "0-3,6"); restore puts the affinity back.
func PinProcess(cpus string) (restore func(), err error) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return nil, err
	}
	set, err := ParseCPUList(cpus)
	if err != nil {
		return nil, err
	}
	if err := pinThreads(&set); err != nil {
		return nil, fmt.Errorf("pinning this process to CPU %s: %w", cpus, err)
	}
	return func() { pinThreads(&all) }, nil
}

// ParseCPUList reads a taskset CPU list: numbers and ranges ("0-3")
// separated by commas.
func ParseCPUList(cpus string) (unix.CPUSet, error) {
	var set unix.CPUSet
	for _, item := range strings.Split(cpus, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(item), "-")
		first, err := strconv.Atoi(lo)
		last := first
		if err == nil && isRange {
			last, err = strconv.Atoi(hi)
		}
		if err != nil || first < 0 || last < first || last >= 1024 {
			return set, fmt.Errorf("CPU list %q: %q is not a CPU number or range (0-1023, as 0 or 0-3)", cpus, item)
		}
		for n := first; n <= last; n++ {
			set.Set(n)
		}
	}
	return set, nil
}

// pinThreads sets the affinity of every thread of this process. A thread
// inherits its creator's, so a few passes catch the ones started during
// the first.
func pinThreads(set *unix.CPUSet) error {
	for range 3 {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, e := range ents {
			tid, _ := strconv.Atoi(e.Name())
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				return err
			}
		}
	}
	return nil
}

// Start runs a relay as Start does, placed as s says: in cheap-vm under
// taskset on RelayCPU with GOMAXPROCS=1, then moved into a cgroup of its
// own capped at CapPct. Release removes the cgroups once Stop has ended
// the processes.
func (s *Shape) Start(dir, name, bin string, args ...string) (*exec.Cmd, error) {
	if !s.Pinned() {
		return Start(dir, name, bin, args...)
	}
	path, err := LookPath(bin)
	if err != nil {
		return nil, err
	}
	cmd, err := start(dir, name, []string{"GOMAXPROCS=1"}, "taskset", append([]string{"-c", strconv.Itoa(s.RelayCPU), path}, args...)...)
	if err != nil || s.CapPct == 0 {
		return cmd, err
	}
	g, err := newCgroup(name, s.CapPct)
	if err == nil {
		s.groups = append(s.groups, g)
		err = g.add(cmd.Process.Pid)
	}
	if err != nil { // no relay runs uncapped in a capped shape
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	s.quota = g.quota()
	capped.Lock()
	capped.m[cmd.Process.Pid] = g
	capped.Unlock()
	return cmd, nil
}

// Release removes the cgroups s made; call it after Stop.
func (s *Shape) Release() error {
	var errs []error
	for _, g := range s.groups {
		errs = append(errs, g.remove())
		g.forget()
	}
	capped.Lock()
	for pid, g := range capped.m {
		for _, h := range s.groups {
			if g == h {
				delete(capped.m, pid)
			}
		}
	}
	capped.Unlock()
	s.groups = nil
	return errors.Join(errs...)
}

// Describe is the report's line on how s placed the processes.
func (s *Shape) Describe() string {
	if !s.Pinned() {
		return fmt.Sprintf("Shape **shared**: relays, clients and backends float over all %d CPUs; each relay runs its default threads "+
			"(ours: GOMAXPROCS = CPUs; HAProxy: nbthread = CPUs; nginx: 1 worker).\n\n", runtime.NumCPU())
	}
	c := "uncapped"
	if s.CapPct > 0 {
		c = fmt.Sprintf("capped at %d %% of it (%s)", s.CapPct, s.quota)
	}
	return fmt.Sprintf("Shape **cheap-vm**: each relay alone on CPU %d (taskset) with one thread (ours: GOMAXPROCS=1; HAProxy: nbthread 1; nginx: 1 worker), %s; "+
		"clients and backends (the benchmark process, GOMAXPROCS=1) on CPU %d.\n\n", s.RelayCPU, c, s.LoadCPU)
}

// RunShapes measures in each shape in turn and returns the reports
// measure made, joined. In each, it pins this process (Enter), starts the
// targets in list (StartTargets) with the starters made for a directory
// of the shape's own under dir, runs measure on them, then stops them and
// removes the cgroups.
func RunShapes(shapes []*Shape, dir, list string, starters func(s *Shape, dir string) map[string]Starter,
	measure func(s *Shape, targets []*Target) (report string, err error)) (string, error) {
	var b strings.Builder
	for _, s := range shapes {
		report, err := s.run(dir, list, starters, measure)
		if err != nil {
			return "", fmt.Errorf("%s: %w", s.Name, err)
		}
		b.WriteString(report)
	}
	return b.String(), nil
}

func (s *Shape) run(dir, list string, starters func(s *Shape, dir string) map[string]Starter,
	measure func(s *Shape, targets []*Target) (string, error)) (report string, err error) {
	dir = filepath.Join(dir, s.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	leave, err := s.Enter()
	if err != nil {
		return "", err
	}
	defer leave()
	targets, procs, err := StartTargets(list, dir, starters(s, dir))
	defer func() {
		Stop(procs)
		if rerr := s.Release(); err == nil {
			err = rerr
		}
	}()
	if err != nil {
		return "", err
	}
	return measure(s, targets)
}
