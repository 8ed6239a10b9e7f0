package core

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/edgefleet/edgefleet/ldap/wire"
	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
)

// A session re-binds on another server with the bind that established
// its identity (dial, rebind). When the user changes their own password
// in the session — a Password Modify extended operation (RFC 3062) for
// themselves (not one for another user, named or the identity of a
// proxied authorization control), or a modify of their own entry's
// userPassword — that bind
// is stale once the server accepts the change: the core then re-binds
// with the new password, which it knows from the request (or, for a
// password the server generated, from the response). When it cannot know
// it (a hashed value such as {SSHA}…, several values, a password
// deleted, a SASL identity), the identity cannot be re-established: an
// operation that must fail over gets unavailable (52) saying so, and the
// client binds again.

// noReplay says why the identity in force cannot be re-established on
// another server (credOK false).
func (ss *session) noReplay() string {
	if ss.credWhy != "" {
		return ss.credWhy
	}
	return fmt.Sprintf("the SASL identity of %q cannot be re-established on another server", ss.user)
}

// passwordChanged follows a request the server on b answered with
// success (raw, the response): when it changed the bound user's own
// password, the saved bind is replaced or marked stale.
func (ss *session) passwordChanged(o *op, b *backend, raw []byte) {
	if ss.cred == nil || !ss.credOK && ss.credWhy == "" { // anonymous, or a multi-step SASL identity
		return
	}
	var pw []byte
	known := false
	switch {
	case o.m.Op == wire.TagExtendedRequest && o.m.ExtOID == wire.OIDPasswdModify:
		pm, err := wire.ParsePasswdModify(o.m.Raw)
		// Whose password: the one named, else the request's authorization
		// identity — the proxied one when the request carries it.
		if err == nil && (pm.HasUser && !ss.isUser(pm.User) || !pm.HasUser && pm.HasProxy && !ss.isUser(pm.Proxy)) {
			return // someone else's password (as far as the core can tell)
		}
		switch {
		case err != nil:
		case pm.HasNew:
			pw, known = pm.New, true
		default:
			pw, known = wire.GeneratedPasswd(raw)
		}
	case o.m.Op == wire.TagModifyRequest && ss.norm != "" && dlp.NormalizeDN(o.m.EntryDN) == ss.norm:
		changes, err := wire.ModifyChanges(o.m.Raw)
		touched := err != nil
		for _, c := range changes {
			if dlp.CanonicalAttr(c.Attr) != "userpassword" {
				continue
			}
			touched = true
			// The password after the change: the one value added or
			// put in place; after a delete, or with several values,
			// the core cannot tell which one the user will bind with.
			pw, known = nil, false
			if c.Op != wire.ModDelete && len(c.Values) == 1 {
				pw, known = c.Values[0], true
			}
		}
		if !touched {
			return
		}
	default:
		return
	}
	how := fmt.Sprintf("%s on %s", o.name, b.name)
	if o.m.Op == wire.TagExtendedRequest {
		how = "Password Modify on " + b.name
	}
	bind, err := wire.Parse(ss.cred)
	switch {
	case err != nil || !bind.BindSimple:
		ss.staleCred(how, "the bind that established it was not a simple bind")
	case !known || hashed(pw):
		ss.staleCred(how, "the core does not know the new password")
	default:
		ss.cred, ss.credOK, ss.credWhy = wire.BindRequest(bind.ID, bind.BindName, bytes.Clone(pw)), true, ""
		ss.srv.log.Info("password changed: re-binds use the new one", ss.who("op", o.name, "target", b.name)...)
	}
}

// isUser reports whether id, a Password Modify user identity or an
// authzId (a DN, or "dn:" and a DN), names the bound user.
func (ss *session) isUser(id string) bool {
	return ss.norm != "" && dlp.NormalizeDN(strings.TrimPrefix(id, "dn:")) == ss.norm
}

// staleCred marks the saved bind as no longer usable after a password
// change.
func (ss *session) staleCred(how, why string) {
	ss.credOK = false
	ss.credWhy = fmt.Sprintf("the password of %q was changed in this session (%s) and %s, so the identity cannot be re-established on another server: bind again", ss.user, how, why)
	ss.srv.log.Info("password changed: no re-bind possible", ss.who("err", ss.credWhy)...)
}

// hashed reports whether a userPassword value is stored as a hash
// ({SSHA}…, {CRYPT}…): binding needs the cleartext, which the core does
// not have.
func hashed(pw []byte) bool {
	return len(pw) > 2 && pw[0] == '{' && bytes.IndexByte(pw, '}') > 1
}
