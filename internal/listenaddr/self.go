package listenaddr

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// resolveTimeout bounds the name lookups of SelfTarget.
const resolveTimeout = 5 * time.Second

// SelfTarget returns the listen address that target (a host:port the
// relay forwards to) reaches, or "" when it reaches none: the relay would
// forward every connection to itself. Names are resolved ("localhost", an
// inventory name); an IPv4-mapped address is its IPv4 twin; a wildcard
// listen host ("", 0.0.0.0, ::) covers every address of this host. A name
// that does not resolve reaches nothing (its dial will fail and say so).
// Names are looked up only when a listen port is target's port.
func SelfTarget(listen []string, target string) string {
	thost, tport, err := net.SplitHostPort(target)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	var targets, local []netip.Addr // looked up once, when a listen port matches
	resolved := false
	for _, l := range listen {
		lhost, lport, err := net.SplitHostPort(l)
		if err != nil || !samePort(lport, tport) {
			continue
		}
		if !resolved {
			targets, resolved = resolve(ctx, thost), true
		}
		if wildcard(lhost) {
			if local == nil {
				local = hostAddrs()
			}
			for _, t := range targets {
				if t.IsLoopback() || t.IsUnspecified() || contains(local, t) {
					return l
				}
			}
			continue
		}
		for _, a := range resolve(ctx, lhost) {
			for _, t := range targets {
				if t == a || t.IsUnspecified() { // connecting to 0.0.0.0 reaches this host
					return l
				}
			}
		}
	}
	return ""
}

func samePort(a, b string) bool {
	pa, err1 := strconv.Atoi(a)
	pb, err2 := strconv.Atoi(b)
	return err1 == nil && err2 == nil && pa == pb && pa != 0
}

func wildcard(host string) bool {
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsUnspecified()
}

// resolve returns host's addresses, unmapped; none when it does not
// resolve.
func resolve(ctx context.Context, host string) []netip.Addr {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs
}

// hostAddrs returns the addresses of this host's interfaces.
func hostAddrs() []netip.Addr {
	ifs, err := net.InterfaceAddrs()
	out := []netip.Addr{}
	if err != nil {
		return out
	}
	for _, ia := range ifs {
		if n, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

func contains(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if a == b {
			return true
		}
	}
	return false
}
