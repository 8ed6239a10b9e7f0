package probe

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// dialWalk connects to one of ips (on port) the way Go's net.Dialer
// connects to a name's addresses once it has resolved them, so that the
// agent's dial of the name costs what it cost without edgefleet, minus
// the second lookup: the addresses of the other family than nd's source
// are left out; the first address's family goes first and, after
// nd.FallbackDelay (300 ms when 0; negative: never), the other family
// races it (Happy Eyeballs, RFC 8305); within each family the addresses
// are tried in turn, each given the time left divided by the addresses
// left, but at least 2 s.
func dialWalk(ctx context.Context, nd *net.Dialer, ips []netip.Addr, port int) (net.Conn, error) {
	if local, ok := nd.LocalAddr.(*net.TCPAddr); ok && local != nil && !local.IP.IsUnspecified() {
		v4 := local.IP.To4() != nil
		var kept []netip.Addr
		for _, ip := range ips {
			if ip.Unmap().Is4() == v4 {
				kept = append(kept, ip)
			}
		}
		if len(kept) == 0 {
			return nil, &net.AddrError{Err: "no suitable address found", Addr: local.String()}
		}
		ips = kept
	}
	if len(ips) == 0 {
		return nil, errors.New("no address to dial")
	}
	var primaries, fallbacks []netip.Addr
	for _, ip := range ips {
		if ip.Unmap().Is4() == ips[0].Unmap().Is4() || nd.FallbackDelay < 0 {
			primaries = append(primaries, ip)
		} else {
			fallbacks = append(fallbacks, ip)
		}
	}
	if len(fallbacks) == 0 {
		return dialSerial(ctx, nd, primaries, port)
	}
	return dialRace(ctx, nd, primaries, fallbacks, port)
}

// dialRace is Go's dialParallel: primaries first, fallbacks after the
// fallback delay or at once when the primaries have all failed; the
// first connection wins; both failing is the primaries' error.
func dialRace(ctx context.Context, nd *net.Dialer, primaries, fallbacks []netip.Addr, port int) (net.Conn, error) {
	type result struct {
		c       net.Conn
		err     error
		primary bool
	}
	returned := make(chan struct{})
	defer close(returned)
	results := make(chan result)
	racer := func(ctx context.Context, primary bool) {
		ips := primaries
		if !primary {
			ips = fallbacks
		}
		c, err := dialSerial(ctx, nd, ips, port)
		select {
		case results <- result{c, err, primary}:
		case <-returned:
			if c != nil {
				c.Close()
			}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the loser's dial
	go racer(ctx, true)
	delay := nd.FallbackDelay
	if delay == 0 {
		delay = 300 * time.Millisecond
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	var primaryErr error
	done := 0
	for {
		select {
		case <-timer.C:
			go racer(ctx, false)
		case r := <-results:
			if r.err == nil {
				return r.c, nil
			}
			if done++; done == 2 {
				if primaryErr == nil {
					return nil, r.err
				}
				return nil, primaryErr
			}
			if r.primary {
				primaryErr = r.err
				if timer.Stop() {
					timer.Reset(0) // the primaries failed before the delay: the fallbacks now
				}
			}
		}
	}
}

// dialSerial is Go's dialSerial: ips in turn, each within its share of
// ctx's time; the first error is the one returned.
func dialSerial(ctx context.Context, nd *net.Dialer, ips []netip.Addr, port int) (net.Conn, error) {
	var firstErr error
	for i, ip := range ips {
		addr := net.JoinHostPort(ip.String(), strconv.Itoa(port))
		if err := ctx.Err(); err != nil {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Source: nd.LocalAddr, Err: err}
		}
		dctx := ctx
		if deadline, ok := ctx.Deadline(); ok {
			left := time.Until(deadline)
			if left <= 0 {
				if firstErr == nil {
					firstErr = &net.OpError{Op: "dial", Net: "tcp", Source: nd.LocalAddr, Err: context.DeadlineExceeded}
				}
				break
			}
			share := max(left/time.Duration(len(ips)-i), min(2*time.Second, left))
			var cancel context.CancelFunc
			dctx, cancel = context.WithTimeout(ctx, share)
			defer cancel()
		}
		c, err := nd.DialContext(dctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}
