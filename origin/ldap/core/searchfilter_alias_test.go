package core_test

import (
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/go-ldap/ldap/v3"
)

// A searchfilter route that prohibits cn cannot be reached by naming cn
// another way: its long name, its OID, with an option, through its
// supertype name, or by an extensible match without a type — each of
// which slapd evaluates against cn (the entry is found either way) — and
// an allowed uid is recognised as userid, by its OID and with an option.
func TestSearchFilterAttributeAliases(t *testing.T) {
	// slapd may fail a filter with an option it does not know (x-tag),
	// and need not find the entry through a filter with an option.
	lax := func(filter string) (mayFail, anyEntries bool) {
		return strings.Contains(filter, ";x-tag"), strings.Contains(filter, ";")
	}
	searchFilterRouting(t, `{"server": "L1", "priority": 1, "allowed": ["uid"], "prohibited": ["cn"]}`, lax, []filterRoute{
		{"(uid=alice)", "L1"},
		{"(userid=alice)", "L1"},
		{"(0.9.2342.19200300.100.1.1=alice)", "L1"},
		{"(uid;x-tag=alice)", "L1"},
		{"(&(uid=alice)(cn=alice))", "L2"},
		{"(&(uid=alice)(commonName=alice))", "L2"},
		{"(&(uid=alice)(CommonName=alice))", "L2"},
		{"(&(uid=alice)(2.5.4.3=alice))", "L2"},
		{"(&(uid=alice)(cn;lang-en=alice))", "L2"},
		{"(&(uid=alice)(name=alice))", "L2"},
		{"(&(uid=alice)(:caseIgnoreMatch:=alice))", "L2"},
	})
}

// The route's own lists are read as slapd reads names too: prohibited
// written as the OID with an option and in upper case, allowed as
// userid. Every filter form that tests cn — substring, approx, presence,
// a not, an extensible match with cn as its type (also by OID) or with
// dnAttributes and no type — keeps the search off L1.
func TestSearchFilterListAliasesEveryFilterForm(t *testing.T) {
	searchFilterRouting(t, `{"server": "L1", "priority": 1, "allowed": ["USERID"], "prohibited": ["2.5.4.3;Lang-EN"]}`, nil, []filterRoute{
		{"(uid=alice)", "L1"},
		{"(&(uid=alice)(ou:dn:=people))", "L1"},
		{"(&(uid=alice)(cn=al*))", "L2"},
		{"(&(uid=alice)(cn~=alice))", "L2"},
		{"(&(uid=alice)(cn=*))", "L2"},
		{"(&(uid=alice)(!(cn=bob)))", "L2"},
		{"(&(uid=alice)(cn:dn:=alice))", "L2"},
		{"(&(uid=alice)(2.5.4.3:2.5.13.2:=alice))", "L2"},
		{"(&(uid=alice)(:dn:2.5.13.2:=alice))", "L2"},
	})
}

// A filterRoute is a search filter and the server it must go to.
type filterRoute struct{ filter, want string }

// searchFilterRouting starts two slapds behind a searchfilter balancer
// whose first route, to L1, is l1Route (the second, L2, takes the rest)
// and, bound as alice, searches ou=people with each filter: it must go to
// its server and find alice's entry. lax, when not nil, says of a filter
// that slapd may fail it (mayFail) or find no entry (anyEntries).
func searchFilterRouting(t *testing.T, l1Route string, lax func(filter string) (mayFail, anyEntries bool), cases []filterRoute) {
	t.Helper()
	sl := testbed.StartSlapds(t, 2, testbed.SlapdConfig{})
	h := newHarness(t, allBalanced(sl, 3, 60, 3600, "SF",
		`{"object": "LoadBalancer", "name": "SF", "algorithm": "searchfilter", "routes": [
    `+l1Route+`,
    {"server": "L2", "priority": 2}]}`), nil)
	c := boundClient(t, h)
	for _, tc := range cases {
		mayFail, anyEntries := false, false
		if lax != nil {
			mayFail, anyEntries = lax(tc.filter)
		}
		before := len(h.targets("search"))
		res, err := c.Search(ldap.NewSearchRequest("ou=people,"+testbed.Suffix, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
			0, 0, false, tc.filter, []string{"cn"}, nil))
		if err != nil && !mayFail {
			t.Errorf("search %s: %v", tc.filter, err)
			continue
		}
		if err == nil && !anyEntries && len(res.Entries) != 1 {
			t.Errorf("search %s: %d entries, want alice's", tc.filter, len(res.Entries))
		}
		if got := h.targets("search"); len(got) != before+1 || got[before] != tc.want {
			t.Errorf("search %s went to %v, want %s", tc.filter, got[before:], tc.want)
		}
	}
}
