package wire

// Searches that follow a directory's changes: their answers are the
// server's own stream of changes, which no other server can continue.

// The controls of a search that stays open to follow changes.
const (
	// OIDSyncRequest is the Sync Request Control of content
	// synchronization (RFC 4533), syncrepl's.
	OIDSyncRequest = "1.3.6.1.4.1.4203.1.9.1.1"
	// OIDPersistentSearch is the Persistent Search control
	// (draft-ietf-ldapext-psearch-03).
	OIDPersistentSearch = "2.16.840.1.113730.3.4.3"
)

// ResultSyncRefreshRequired is e-syncRefreshRequired (RFC 4533 §2.6): the
// consumer must refresh its content.
const ResultSyncRefreshRequired = 4096

// HasControl reports whether a message carries a control of type oid;
// false too when its controls cannot be read.
func HasControl(raw []byte, oid string) bool {
	_, _, controls, ok, err := parts(raw)
	if err != nil || !ok {
		return false
	}
	for d := controls.inner(); d.more(); {
		c, err := d.next()
		if err != nil {
			return false
		}
		typ, err := c.inner().expect(0x04, "controlType")
		if err == nil && string(typ.value) == oid {
			return true
		}
	}
	return false
}
