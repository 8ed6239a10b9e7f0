package core_test

import (
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/go-ldap/ldap/v3"
)

// Replicas that cap the page size (slapd's size.pr=1000, which answers a
// larger page adminLimitExceeded): a paged search of 300-entry pages whose
// server dies after 2,100 entries, between pages or with a page in
// flight, restarts on the next server in pages of the client's size, and
// the client gets every entry once. (One restart page of entries
// received + page size, 2,400, gets adminLimitExceeded.)
func TestPagedRestartWithinServerLimits(t *testing.T) {
	const n, size = 3000, 300
	for _, inFlight := range []bool{false, true} {
		name := "between pages"
		if inFlight {
			name = "with a page in flight"
		}
		t.Run(name, func(t *testing.T) {
			sl, h, c := aliceFailsOver(t, testbed.SlapdConfig{LDIF: testbed.DirectoryLDIF(n), Limits: []string{"* size.pr=1000"}})
			paging := ldap.NewControlPaging(size)
			req := ldap.NewSearchRequest("ou=bulk,"+testbed.Suffix, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
				0, 0, false, "(objectClass=*)", []string{"1.1"}, []ldap.Control{paging})
			seen := map[string]int{}
			pages := 0
			for page := 1; ; page++ {
				var res *ldap.SearchResult
				var err error
				switch {
				case page == 8 && inFlight:
					// The page request reaches a frozen L1, which then dies.
					sl[0].Freeze()
					done := make(chan struct{})
					go func() { res, err = c.Search(req); close(done) }()
					waitRecvQueue(t, sl[0].Addr)
					sl[0].Kill()
					<-done
				case page == 8:
					sl[0].Stop()
					fallthrough
				default:
					res, err = c.Search(req)
				}
				if err != nil {
					t.Fatalf("page %d, after %d entries: %v", page, len(seen), err)
				}
				pages++
				for _, e := range res.Entries {
					seen[e.DN]++
				}
				if len(res.Entries) > size {
					t.Errorf("page %d: %d entries, asked for %d", page, len(res.Entries), size)
				}
				pc, _ := ldap.FindControl(res.Controls, ldap.ControlTypePaging).(*ldap.ControlPaging)
				if pc == nil || len(pc.Cookie) == 0 {
					break
				}
				paging.SetCookie(pc.Cookie)
			}
			if len(seen) != n+1 {
				t.Errorf("%d distinct entries in %d pages, want %d", len(seen), pages, n+1)
			}
			for dn, k := range seen {
				if k != 1 {
					t.Fatalf("%s received %d times", dn, k)
				}
			}
			if len(h.logs.JSONLines("paged search restarted")) != 1 {
				t.Error("the paged search was not restarted once")
			}
		})
	}
}
