package wire_test

import (
	"testing"

	ber "github.com/go-asn1-ber/asn1-ber"
	"github.com/go-ldap/ldap/v3"

	"github.com/edgefleet/edgefleet/ldap/wire"
)

// The sync request control as go-ldap's Syncrepl sends it, after the
// paged-results control; the persistent search control alone; neither.
func TestHasControl(t *testing.T) {
	syncReq := ldap.NewControlSyncRequest(ldap.SyncRequestModeRefreshAndPersist, []byte("rid=001"), false).Encode()
	withSync := msg(4, app(ber.Tag(3)), ctxCons(0, seq(octets(wire.OIDPagedResults)), syncReq))
	if !wire.HasControl(withSync, wire.OIDSyncRequest) || wire.HasControl(withSync, wire.OIDPersistentSearch) {
		t.Errorf("sync request: HasControl sync %v, psearch %v", wire.HasControl(withSync, wire.OIDSyncRequest), wire.HasControl(withSync, wire.OIDPersistentSearch))
	}
	psearch := msg(4, app(ber.Tag(3)), ctxCons(0, seq(octets(wire.OIDPersistentSearch), octets("x"))))
	if !wire.HasControl(psearch, wire.OIDPersistentSearch) || wire.HasControl(psearch, wire.OIDSyncRequest) {
		t.Error("persistent search: not found, or taken for a sync request")
	}
	for name, raw := range map[string][]byte{
		"no controls":     search(t, 2, "", "(cn=x)"),
		"prefix of a oid": msg(2, app(ber.Tag(3)), ctxCons(0, seq(octets(wire.OIDSyncRequest+".1")))),
		"bad control":     msg(2, app(ber.Tag(3)), ctxCons(0, integer(1))),
	} {
		if wire.HasControl(raw, wire.OIDSyncRequest) {
			t.Errorf("%s: HasControl true", name)
		}
	}
}
