package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgefleet/edgefleet/cmd/internal/cli"
	"github.com/edgefleet/edgefleet/deploy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

func init() { subcommands = append(subcommands, watchCommand) }

// watchMetrics are fleet watch's /metrics (docs/watch.md).
type watchMetrics struct {
	healthy      *prometheus.GaugeVec
	checks       *prometheus.CounterVec
	withdrawals  prometheus.Counter
	restorations prometheus.Counter
	replacements *prometheus.CounterVec
	allFailing   prometheus.Gauge
}

func newWatchMetrics(reg *prometheus.Registry) *watchMetrics {
	m := &watchMetrics{
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edgefleet_fleet_edge_healthy",
			Help: "1 when the edge passed its last end-to-end check, 0 when it failed."}, []string{"edge"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgefleet_fleet_checks_total",
			Help: "End-to-end checks of each edge, by result (ok, fail)."}, []string{"edge", "result"}),
		withdrawals: prometheus.NewCounter(prometheus.CounterOpts{Name: "edgefleet_fleet_withdrawals_total",
			Help: "Edges withdrawn from DNS after fall failed checks."}),
		restorations: prometheus.NewCounter(prometheus.CounterOpts{Name: "edgefleet_fleet_restorations_total",
			Help: "Withdrawn edges published again after rise passed checks."}),
		replacements: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edgefleet_fleet_replacements_total",
			Help: "Runs of watch.replace.command, by result (ok, fail)."}, []string{"result"}),
		allFailing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "edgefleet_fleet_all_edges_failing",
			Help: "1 while every checked edge fails: nothing is withdrawn, the origin is the likely fault."}),
	}
	m.replacements.WithLabelValues("ok")
	m.replacements.WithLabelValues("fail")
	reg.MustRegister(m.healthy, m.checks, m.withdrawals, m.restorations, m.replacements, m.allFailing)
	return m
}

func watchCommand() *cobra.Command {
	var fl convergeFlags
	var metrics string
	var backoff time.Duration
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "keep the published fleet healthy: withdraw failing edges, restore recovered ones",
		Long: `watch probes every address of every published edge end to end each round
(watch.interval, full jitter), as apply does. An edge failing watch.fall checks
in a row is withdrawn (DNS first, the firewall after one TTL plus slack and
its drain), never below watch.min_edges published; when every edge fails
nothing is withdrawn and edgefleet_fleet_all_edges_failing is 1. A withdrawn
edge stays let in by the firewall until resolvers no longer hold it and it
drained, then is dropped; it is let in again for a recheck after one interval,
doubling after each failed one up to 10 min, and, passing watch.rise checks in
a row, restored (firewall, probe, DNS).
Withdrawals are kept in fleet.state.json, never in fleet.yaml. Every change
is made under the inventory's lock, taken per round: a round that finds it
held is skipped. See docs/watch.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := fl.check(); err != nil {
				return err
			}
			p, err := setupFleet(cmd, fl)
			if err != nil {
				return err
			}
			if err := needEdges(p.f); err != nil {
				return err
			}
			if err := checkEdges(p.f.Config, fl); err != nil {
				return err
			}
			_, log, _ := loadFleet(cmd)
			reg := prometheus.NewRegistry()
			if backoff <= 0 {
				return cli.Exit(cli.ExitConfig, fmt.Errorf("--replace-backoff %v: must be positive", backoff))
			}
			w := &watcher{cmd: cmd, fl: fl, log: log, m: newWatchMetrics(reg), health: map[string]*deploy.Health{},
				replace: map[string]*hookState{}, backoff: backoff}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if metrics != "" {
				ln, err := net.Listen("tcp", metrics)
				if err != nil {
					return cli.Exit(1, fmt.Errorf("--metrics %s: %w", metrics, err))
				}
				srv := cli.HTTPServer(cli.Metrics(reg), log, "metrics")
				go srv.Serve(ln)
				defer srv.Close()
				log.Info("fleet watch metrics listening", "addr", ln.Addr().String())
			}
			wc := p.f.Watch
			log.Info("fleet watch started", "interval", wc.Interval, "fall", wc.Fall, "rise", wc.Rise, "min_edges", wc.MinEdges)
			for {
				pause := w.round(ctx)
				w.replaceDue(ctx)
				t := time.NewTimer(pause)
				select {
				case <-ctx.Done():
					t.Stop()
					log.Info("fleet watch stopping")
					return nil
				case <-t.C:
				}
			}
		},
	}
	fl.register(cmd.Flags(), true)
	cmd.Flags().StringVar(&metrics, "metrics", "", "host:port to serve /metrics on (none when empty)")
	cmd.Flags().DurationVar(&backoff, "replace-backoff", 30*time.Second, "the wait after a failed replace hook, doubling each time up to 60 times it")
	return cmd
}

// watcher is one fleet watch: the health history of each edge, kept in
// memory across rounds (a restart starts it afresh; the phase of each
// withdrawal and its recheck back-off are in the state file).
type watcher struct {
	cmd    *cobra.Command
	fl     convergeFlags
	log    *slog.Logger
	m      *watchMetrics
	health map[string]*deploy.Health // by edge name=addresses: a re-addressed edge starts afresh
	// replace is the hook's record per withdrawn edge (name=addresses):
	// failures in a row and when it may run again.
	replace map[string]*hookState
	backoff time.Duration // the first wait after a failed hook
}

type hookState struct {
	failures int
	next     time.Time
}

// round checks the fleet once and acts on the decision; it returns the
// pause before the next round. fleet.yaml and the state are read again
// every round, so an operator's rotation is never undone.
func (w *watcher) round(ctx context.Context) time.Duration {
	p, err := setupFleet(w.cmd, w.fl)
	if err != nil {
		w.log.Error("round skipped: fleet.yaml", "err", err)
		return deploy.DefaultWatch().Interval
	}
	cfg := p.f.Config
	pause := cfg.Watch.Pause(nil)
	sp := statePath(p.f.path)
	live, err := p.pub.Read(ctx)
	if err != nil {
		w.log.Error("round skipped: dns not read", "err", err)
		return pause
	}
	st, err := deploy.LoadState(sp)
	if err != nil {
		w.log.Error("round skipped", "err", err)
		return pause
	}
	st = w.recheck(ctx, p, st)
	hs, byName := w.check(ctx, p, st, live)
	d := deploy.Decide(cfg.Watch, len(cfg.Edges), hs)
	if d.AllFailing {
		w.m.allFailing.Set(1)
		w.log.Error("all edges failing: nothing withdrawn, the origin is the likely fault", "edges", len(hs))
	} else {
		w.m.allFailing.Set(0)
	}
	var changes []deploy.Action
	for _, a := range d.Actions {
		if a.Op == deploy.ActHold {
			w.log.Warn("hold", "edge", a.Edge, "reason", a.Reason, "last_err", a.LastErr)
			continue
		}
		changes = append(changes, a)
	}
	if len(changes) == 0 && !needsConverge(cfg, st, live, w.fl.slack, time.Now()) {
		return pause
	}
	w.act(ctx, sp, changes, byName)
	return pause
}

// recheck lets in again, under the lock, the withdrawn edges out of the
// firewall whose recheck is due (deploy.RecheckDue), so that this round's
// checks go through them; it returns the state as it is then.
func (w *watcher) recheck(ctx context.Context, p fleetParts, st *deploy.State) *deploy.State {
	cfg, sp := p.f.Config, statePath(p.f.path)
	if len(deploy.RecheckDue(cfg, st, time.Now())) == 0 {
		return st
	}
	unlock, err := deploy.TryLockState(sp)
	if err != nil {
		w.log.Info("rechecks skipped: another fleet command holds the lock", "err", err)
		return st
	}
	defer unlock()
	cur, err := deploy.LoadState(sp)
	if err != nil {
		w.log.Error("rechecks skipped", "err", err)
		return st
	}
	st = cur
	for _, e := range deploy.RecheckDue(cfg, st, time.Now()) {
		wd := st.Withdrawn[e.Name]
		st.Recheck(e.Name)
		w.health[e.String()] = &deploy.Health{Edge: e.Name} // its checks count from here
		w.log.Info("recheck", "edge", e.Name, "reason", "let in again for its checks",
			"firewalled_out", time.Since(wd.FirewalledOut).Round(time.Millisecond), "failed_rechecks", wd.FailedRechecks)
	}
	if err := st.Save(sp); err != nil {
		w.log.Error("state not saved: no recheck", "err", err)
		return st
	}
	if err := w.converge(ctx, p, cfg, nil); err != nil {
		w.log.Error("convergence failed; the next round tries again", "err", err)
	}
	if next, err := deploy.LoadState(sp); err == nil {
		st = next
	}
	return st
}

// check probes every address of each published or withdrawn edge (but
// those out of the firewall: they wait for their recheck) and records the
// results; it returns the health of the edges checked, and those edges by
// name.
func (w *watcher) check(ctx context.Context, p fleetParts, st *deploy.State, live deploy.RRSet) ([]deploy.Health, map[string]deploy.Edge) {
	cfg := p.f.Config
	seen := map[string]bool{}
	var hs []deploy.Health
	byName := map[string]deploy.Edge{}
	for _, e := range cfg.Edges {
		withdrawn := st.IsWithdrawn(e)
		if !withdrawn && !deploy.PublishedAddrs(e, live) {
			continue // new or failed: apply's business, not the watch's
		}
		key := e.String()
		seen[key] = true
		if st.FirewalledOut(e) {
			continue
		}
		h := w.health[key]
		if h == nil {
			h = &deploy.Health{Edge: e.Name}
			w.health[key] = h
		}
		h.Withdrawn, h.Rechecking = withdrawn, withdrawn && st.Withdrawn[e.Name].Rechecking
		ok, msg := true, ""
		for _, a := range e.Addrs() {
			addr := net.JoinHostPort(a.String(), strconv.Itoa(cfg.Probe.Port))
			if r := p.probe(ctx, addr); !r.OK {
				ok, msg = false, addr+": "+r.Error
				break
			}
		}
		h.Record(ok, msg)
		result, up := "ok", 1.0
		if !ok {
			result, up = "fail", 0
		}
		w.m.checks.WithLabelValues(e.Name, result).Inc()
		w.m.healthy.WithLabelValues(e.Name).Set(up)
		hs = append(hs, *h)
		byName[e.Name] = e
	}
	for key, h := range w.health {
		if !seen[key] {
			w.m.healthy.DeleteLabelValues(h.Edge)
			delete(w.health, key)
		}
	}
	return hs, byName
}

// act makes a round's changes under the lock, with fleet.yaml and the
// state read again (a rotation may have run since the checks), then
// converges.
func (w *watcher) act(ctx context.Context, sp string, changes []deploy.Action, byName map[string]deploy.Edge) {
	unlock, err := deploy.TryLockState(sp)
	if errors.Is(err, deploy.ErrLocked) {
		w.log.Info("round's changes skipped: another fleet command holds the lock", "changes", len(changes))
		return
	}
	if err != nil {
		w.log.Error("round skipped", "err", err)
		return
	}
	defer unlock()
	p, err := setupFleet(w.cmd, w.fl)
	if err != nil {
		w.log.Error("round skipped: fleet.yaml", "err", err)
		return
	}
	cfg := p.f.Config
	st, err := deploy.LoadState(sp)
	if err == nil {
		err = st.Adopt(cfg, sp)
	}
	if err != nil {
		w.log.Error("round skipped", "err", err)
		return
	}
	var restored []string
	for _, a := range changes {
		e, ok := cfg.Edge(a.Edge)
		if !ok || e.String() != byName[a.Edge].String() {
			w.log.Info("decision dropped: fleet.yaml changed the edge since its checks", "edge", a.Edge, "op", a.Op)
			continue
		}
		if w.apply(st, cfg, e, a) {
			restored = append(restored, a.Edge)
		}
		if h := w.health[e.String()]; h != nil {
			*h = deploy.Health{Edge: e.Name} // counts start again on the other side
		}
	}
	if err := st.Save(sp); err != nil {
		w.log.Error("state not saved: nothing changed", "err", err)
		return
	}
	err = w.converge(ctx, p, cfg, nil)
	if errors.Is(err, deploy.ErrProbe) && len(restored) > 0 {
		// An edge that failed the probe of its restoration goes back out.
		if st, lerr := deploy.LoadState(sp); lerr == nil {
			for _, name := range restored {
				if e, ok := cfg.Edge(name); ok && st.Edges[name] != nil && st.Edges[name].State == deploy.StateFailed {
					st.Withdraw(e, "failed the probe of its restoration", time.Now())
					w.log.Warn("withdraw", "edge", name, "reason", "failed the probe of its restoration", "last_err", st.Edges[name].Error)
				}
			}
			if serr := st.Save(sp); serr == nil {
				err = w.converge(ctx, p, cfg, nil)
			}
		}
	}
	if err != nil {
		w.log.Error("convergence failed; the next round tries again", "err", err)
	}
}

// apply records decision a about edge e in the state, logging it; it
// says whether e was restored.
func (w *watcher) apply(st *deploy.State, cfg deploy.Config, e deploy.Edge, a deploy.Action) bool {
	now := time.Now()
	switch a.Op {
	case deploy.ActWithdraw:
		st.Withdraw(e, a.Reason+": "+a.LastErr, now)
		w.m.withdrawals.Inc()
		w.log.Warn("withdraw", "edge", a.Edge, "reason", a.Reason, "last_err", a.LastErr, "fall", cfg.Watch.Fall)
	case deploy.ActDrop:
		if !st.IsWithdrawn(e) || !st.Withdrawn[e.Name].Rechecking {
			w.log.Info("decision dropped: the state changed the edge since its checks", "edge", a.Edge, "op", a.Op)
			return false
		}
		st.RecheckFailed(e.Name, cfg.Watch.Interval, now)
		wd := st.Withdrawn[e.Name]
		w.log.Warn("drop", "edge", a.Edge, "reason", a.Reason, "last_err", a.LastErr,
			"failed_rechecks", wd.FailedRechecks, "retry_in", wd.NextCheck.Sub(now))
	case deploy.ActRestore:
		since := st.Withdrawn[a.Edge].Since
		st.Restore(a.Edge)
		w.m.restorations.Inc()
		w.log.Info("restore", "edge", a.Edge, "reason", a.Reason, "rise", cfg.Watch.Rise, "duration", time.Since(since).Round(time.Millisecond))
		return true
	}
	return false
}

// needsConverge says whether the live fleet differs from what the
// inventory and the withdrawals want: an edge to publish, a withdrawn one
// still in DNS or past its resolver wait (the firewall drops it), or an
// edge still draining (a run killed mid-way).
func needsConverge(cfg deploy.Config, st *deploy.State, live deploy.RRSet, slack time.Duration, now time.Time) bool {
	for name, wd := range st.Withdrawn {
		e, ok := cfg.Edge(name)
		if ok && st.IsWithdrawn(e) && (deploy.PublishedAddrs(e, live) || wd.Phase() == deploy.PhaseLeaving && wd.LeftDNS.IsZero()) {
			return true // still in DNS, or out of it with no time recorded (killed before its save)
		}
	}
	if len(deploy.DropDue(cfg, st, slack, now)) > 0 {
		return true
	}
	serving := deploy.Serving(cfg, st)
	for _, s := range st.Edges {
		if s.State == deploy.StateDraining {
			return true
		}
	}
	for _, e := range serving.Edges {
		for _, a := range e.Addrs() {
			if !live.Has(a) {
				return true
			}
		}
	}
	for _, a := range live.Addrs() {
		if _, ok := st.Names()[a]; !ok {
			return true
		}
	}
	return false
}

// converge runs the six steps of apply for cfg, its lines logged.
func (w *watcher) converge(ctx context.Context, p fleetParts, cfg deploy.Config, beforePublish func() error) error {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := bufio.NewScanner(pr)
		for s.Scan() {
			w.log.Info(s.Text(), "op", "converge")
		}
	}()
	c := &deploy.Converger{
		Config: cfg, StatePath: statePath(p.f.path),
		DNS: p.pub, Firewall: p.fw, Probe: p.probe, Conns: cfg.Deploy.Scrape(),
		Slack: w.fl.slack, Locked: true, Out: pw, Every: w.fl.every,
		BeforePublish: beforePublish, Defer: true,
	}
	err := c.Run(ctx)
	pw.Close()
	<-done
	return err
}

// replaceDue runs watch.replace.command for each withdrawn edge whose
// back-off is over, and replaces the edge with the one it provisioned.
func (w *watcher) replaceDue(ctx context.Context) {
	f, _, err := loadFleet(w.cmd)
	if err != nil || f.Watch.Replace.Command == "" {
		return
	}
	st, err := deploy.LoadState(statePath(f.path))
	if err != nil {
		return
	}
	due := map[string]bool{}
	for _, e := range f.Edges {
		if !st.IsWithdrawn(e) {
			continue
		}
		key := e.String()
		due[key] = true
		h := w.replace[key]
		if h == nil {
			h = &hookState{}
			w.replace[key] = h
		}
		if time.Now().Before(h.next) || ctx.Err() != nil {
			continue
		}
		start := time.Now()
		in, err := runHook(ctx, f.Watch.Replace, e.Name)
		if err == nil {
			err = w.replaceWith(ctx, e, in)
		}
		if err != nil {
			h.failures++
			d := deploy.Backoff(w.backoff, 60*w.backoff, h.failures)
			h.next = time.Now().Add(d)
			w.m.replacements.WithLabelValues("fail").Inc()
			w.log.Error("replace", "edge", e.Name, "result", "fail", "err", err, "failures", h.failures, "retry_in", d)
			continue
		}
		delete(w.replace, key)
		w.m.replacements.WithLabelValues("ok").Inc()
		w.log.Info("replace", "edge", e.Name, "result", "ok", "target", in.String(), "duration", time.Since(start).Round(time.Millisecond))
	}
	for key := range w.replace {
		if !due[key] {
			delete(w.replace, key)
		}
	}
}

// runHook runs the replace hook for edge, within its timeout: a shell
// command line with the edge's name as its last argument (and in
// EDGEFLEET_EDGE); it prints the new edge as one JSON object and exits 0.
func runHook(ctx context.Context, r deploy.Replace, edge string) (deploy.Edge, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	c := exec.CommandContext(ctx, "/bin/sh", "-c", r.Command+` "$1"`, "replace", edge)
	c.Env = append(os.Environ(), "EDGEFLEET_EDGE="+edge)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) } // the hook's children too
	c.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	last := strings.TrimSpace(stderr.String())
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return deploy.Edge{}, fmt.Errorf("watch.replace.command timed out after %v", r.Timeout)
	case err != nil:
		return deploy.Edge{}, fmt.Errorf("watch.replace.command: %w (stderr: %q)", err, last)
	}
	return deploy.ParseReplacement(stdout.Bytes())
}

// replaceWith deploys the new edge (deploy push, when the hook gave its
// ssh), then rotates old out for it as fleet rotate does, under the
// inventory's lock: fleet.yaml is written only once in passed its probe.
func (w *watcher) replaceWith(ctx context.Context, old, in deploy.Edge) error {
	f, log, err := loadFleet(w.cmd)
	if err != nil {
		return err
	}
	if in.SSH != "" {
		next := f.Config
		next.Edges = append(slices.Clone(next.Edges), in)
		pc, err := deploy.NewPush(next, in.Name)
		if err != nil {
			return err
		}
		auth, closeAuth, err := sshAuth(f.Deploy.Identity)
		if err != nil {
			return err
		}
		defer closeAuth()
		pc.Auth, pc.Log = auth, log
		if _, err := deploy.Push(ctx, pc); err != nil {
			return fmt.Errorf("deploy push %s: %w", in.Name, err)
		}
	}
	sp := statePath(f.path)
	unlock, err := deploy.LockState(sp)
	if err != nil {
		return err
	}
	defer unlock()
	p, err := setupFleet(w.cmd, w.fl)
	if err != nil {
		return err
	}
	st, err := deploy.LoadState(sp)
	if err != nil {
		return err
	}
	if cur, ok := p.f.Edge(old.Name); !ok || cur.String() != old.String() || !st.IsWithdrawn(cur) {
		return fmt.Errorf("fleet.yaml or the state changed %s since the hook ran: not replaced", old.Name)
	}
	cfg, write, err := rotateInventory(w.cmd, p, old.Name, in, false)
	if err != nil {
		return err
	}
	if err := checkEdges(cfg, w.fl); err != nil {
		return err
	}
	return w.converge(ctx, p, cfg, write)
}
