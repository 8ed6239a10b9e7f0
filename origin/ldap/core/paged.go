package core

import "github.com/edgefleet/edgefleet/ldap/wire"

// Paged searches (RFC 2696) across failover. A paging cookie belongs to
// the server (and connection) that issued it. When the next page of a
// paged search must go to another server, the core restarts the search
// there from the beginning, asking for the entries the client already has
// plus one page, drops those it already has, and forwards the rest with
// the new server's cookie: the client goes on paging without noticing.

// pagedChain is where a cookie handed to the client stands: entries the
// client received in the whole paged search so far, and the backend
// connection that issued the cookie.
type pagedChain struct {
	n  int
	be *backend
}

// maxChains bounds the cookies a session remembers.
const maxChains = 32

// pagedFor is what to send for o on b: its own bytes, or, for the next
// page of a paged search whose cookie another connection issued, the
// search restarted for the entries the client has plus one page.
func (ss *session) pagedFor(o *op, b *backend) []byte {
	o.base = 0
	if o.paged == nil || o.paged.Cookie == "" {
		return o.m.Raw
	}
	ch, ok := ss.chains[o.paged.Cookie]
	if !ok {
		return o.m.Raw
	}
	o.chainN = ch.n
	if ch.be == b || o.paged.Size == 0 { // size 0 ends the paged search
		return o.m.Raw
	}
	raw, err := wire.RestartPaged(o.m.Raw, ch.n+o.paged.Size)
	if err != nil {
		return o.m.Raw
	}
	o.base = ch.n
	ss.srv.log.Info("paged search restarted", ss.who("target", b.name, "skip", ch.n)...)
	return raw
}

// pagedDone remembers where the cookie of a finished page stands.
func (ss *session) pagedDone(o *op, b *backend, raw []byte) {
	p, ok := wire.FindPaged(raw)
	if !ok || p.Cookie == "" {
		return
	}
	if ss.chains == nil {
		ss.chains = map[string]pagedChain{}
	}
	if _, known := ss.chains[p.Cookie]; !known {
		ss.chainOrder = append(ss.chainOrder, p.Cookie)
		if len(ss.chainOrder) > maxChains {
			delete(ss.chains, ss.chainOrder[0])
			ss.chainOrder = ss.chainOrder[1:]
		}
	}
	ss.chains[p.Cookie] = pagedChain{n: o.chainN + o.forwarded, be: b}
}
