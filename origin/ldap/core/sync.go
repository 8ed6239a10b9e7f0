package core

import "github.com/edgefleet/edgefleet/ldap/wire"

// Searches that follow the directory's changes — content synchronization
// (RFC 4533, syncrepl's refreshOnly and refreshAndPersist) and the
// persistent search — are not replayed on another server once sent. What
// the client has is the failed server's stream: its refresh, its cookie,
// its changes since. Another server's stream does not continue it, and a
// replay that skips as many entries as were forwarded drops changes (the
// persist phase's notifications are counted too) and repeats the
// refreshDone. The search ends instead with a result that makes the
// client synchronize again, which the next search does on the next
// server: e-syncRefreshRequired (4096) for a sync search, unavailable
// (52) for a persistent search, whose draft has no such code.

// follow is how a search follows changes.
type follow uint8

const (
	followNone follow = iota
	followSync
	followPersistent
)

// followsOf is how the search request raw follows changes.
func followsOf(raw []byte) follow {
	switch {
	case wire.HasControl(raw, wire.OIDSyncRequest):
		return followSync
	case wire.HasControl(raw, wire.OIDPersistentSearch):
		return followPersistent
	}
	return followNone
}

// endFollow ends o, a search that follows changes, after its server
// connection ended (why names the server and what happened).
func (ss *session) endFollow(o *op, why string) {
	if o.follows == followSync {
		ss.reply(o, wire.ResultSyncRefreshRequired, why+" during content synchronization: refresh (the search is not replayed on another server)")
		return
	}
	ss.reply(o, wire.ResultUnavailable, why+" during a persistent search: search again (it is not replayed on another server)")
}
