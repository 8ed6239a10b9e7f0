package core

import "github.com/edgefleet/edgefleet/ldap/wire"

// Paged searches (RFC 2696) across failover. A paging cookie belongs to
// the server (and connection) that issued it. When the next page of a
// paged search must go to another server, the core restarts the search
// there from the beginning and pages through it itself, in pages of the
// client's size (which the failed replica accepted, so the next one's
// limits accept them too: slapd's size.pr refuses a larger page), drops
// the entries the client already has, and forwards the rest of the page
// where they end with the new server's cookie: the client goes on paging
// without noticing. Entries are counted, not pages, so a server that
// returns fewer entries per page than asked (a silent page cap) makes
// the client's next page shorter, never loses or repeats an entry.

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
// search's first page (the core asks for the next ones: restartPage).
func (ss *session) pagedFor(o *op, b *backend) []byte {
	o.base, o.restarted = 0, false
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
	raw, err := wire.RestartPaged(o.m.Raw, o.paged.Size)
	if err != nil {
		return o.m.Raw
	}
	o.base, o.restarted = ch.n, true
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

// restartPage handles the end of a page of a restarted paged search (o on
// b, final response m, raw): while every entry of it was one the client
// has, the core asks b for the next page itself and reports true; the
// page where the client's entries end, a failure and the last page go to
// the client.
func (ss *session) restartPage(o *op, b *backend, m *wire.Message, raw []byte) bool {
	if !o.restarted || m.ResultCode != wire.ResultSuccess || o.seen > o.skip {
		return false
	}
	p, ok := wire.FindPaged(raw)
	if !ok || p.Cookie == "" {
		return false
	}
	next, err := wire.WithPaged(o.m.Raw, wire.Paged{Size: o.paged.Size, Cookie: p.Cookie})
	if err != nil {
		return false
	}
	if _, err := b.conn.Write(next); err != nil {
		ss.connEnded(b, err)
	}
	return true
}
