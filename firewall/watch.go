package firewall

import (
	"context"
	"errors"
	"fmt"
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
	return fw.WatchGuarded(ctx, src, interval, log, nil)
}

// Guard checks a re-apply: called before it with the round's rule set, it
// notes what works (the edges that get through), and the function it
// returns, called after, reports a regression (an edge that got through
// no longer does) as an error.
type Guard func(c Config) (after func() error)

// ErrRestored is returned (wrapped) by a round whose re-apply a Guard
// found broke a working edge: the previous rules are back.
var ErrRestored = errors.New("the re-applied rules broke a working edge: the previous rules are restored")

// WatchGuarded is Watch with each re-apply checked by guard (nil: none):
// on a regression the rules as they were before the re-apply are
// restored and the round logs why, as `fleet firewall apply` does.
func (fw *Firewall) WatchGuarded(ctx context.Context, src Source, interval time.Duration, log *slog.Logger, guard Guard) error {
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
		err := fw.round(src, log, guard)
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

func (fw *Firewall) round(src Source, log *slog.Logger, guard Guard) error {
	c, release, err := src()
	if err != nil {
		return err
	}
	defer release()
	return fw.enforce(c, log, guard)
}

func (fw *Firewall) enforce(c Config, log *slog.Logger, guard Guard) error {
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
	var saved *Snapshot
	var after func() error
	if guard != nil {
		if saved, err = fw.Save(); err != nil {
			return err
		}
		after = guard(c)
	}
	if err := fw.Apply(p); err != nil {
		return err
	}
	log.Info("firewall re-applied", "chain", p.Chain(), "drift", strings.Join(rep.Diff, "\n"))
	if after == nil {
		return nil
	}
	if rerr := after(); rerr != nil {
		if err := fw.Restore(saved); err != nil {
			log.Error("firewall re-apply broke a working edge, and restoring the previous rules failed", "err", fmt.Errorf("%w; restoring: %w", rerr, err))
			return fmt.Errorf("%w; restoring the previous rules failed too: %w", rerr, err)
		}
		log.Error("firewall re-apply broke a working edge: the previous rules are restored", "err", rerr)
		return fmt.Errorf("%w: %w", ErrRestored, rerr)
	}
	return nil
}
