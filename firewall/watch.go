package firewall

import (
	"context"
	"log/slog"
	"strings"
	"time"
)

// Watch keeps c applied until ctx ends. Every interval it compares the live
// rules with the plan and re-applies when they differ: a dockerd restart
// (or firewalld reload, or a hand-run `iptables -F DOCKER-USER`) drops the
// jump or the chain and silently opens the origin. A missing hook chain
// (dockerd down) is waited for, never created, unless c.CreateChain.
//
// Every iptables command runs on the calling goroutine.
func (fw *Firewall) Watch(ctx context.Context, c Config, interval time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var lastErr string
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := fw.enforce(c, log)
		switch {
		case err != nil && err.Error() != lastErr:
			log.Warn("firewall not applied, retrying", "err", err, "interval", interval)
		case err == nil && lastErr != "":
			log.Info("firewall applied again")
		}
		lastErr = ""
		if err != nil {
			lastErr = err.Error()
		}
		t.Reset(interval)
	}
}

func (fw *Firewall) enforce(c Config, log *slog.Logger) error {
	p, err := fw.Plan(c)
	if err != nil {
		return err
	}
	rep, err := fw.CheckPlan(p)
	if err != nil {
		return err
	}
	if rep.InSync() {
		return nil
	}
	if err := fw.Apply(p); err != nil {
		return err
	}
	log.Info("firewall re-applied", "chain", p.Chain(), "drift", strings.Join(rep.Diff, "\n"))
	return nil
}
