package firewall

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"
)

// Source gives the watch the rule set to enforce, read afresh each round
// (the inventory and what a convergence in progress still allows), and
// release to call once the round is done (the inventory's lock, so that
// no convergence changes the rules in between). ErrBusy skips the round.
type Source func() (c Config, release func(), err error)

// ErrBusy is returned by a Source while another writer holds the rules.
var ErrBusy = errors.New("another writer holds the firewall")

// Static is a Source of one fixed Config.
func Static(c Config) Source {
	return func() (Config, func(), error) { return c, func() {}, nil }
}

// Watch keeps the rules applied until ctx ends. Every interval it reads
// the rule set from src, compares the live rules with its plan and
// re-applies when they differ: a dockerd restart (or firewalld reload, or
// a hand-run `iptables -F DOCKER-USER`) drops the jump or the chain and
// silently opens the origin. A missing hook chain (dockerd down) is
// waited for, never created, unless the Config says CreateChain.
//
// Every iptables command runs on the calling goroutine.
func (fw *Firewall) Watch(ctx context.Context, src Source, interval time.Duration, log *slog.Logger) error {
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
		err := fw.round(src, log)
		switch {
		case errors.Is(err, ErrBusy):
			log.Debug("firewall watch: round skipped", "err", err)
			t.Reset(interval)
			continue
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

func (fw *Firewall) round(src Source, log *slog.Logger) error {
	c, release, err := src()
	if err != nil {
		return err
	}
	defer release()
	return fw.enforce(c, log)
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
