package core_test

import (
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/go-ldap/ldap/v3"
)

// SASL EXTERNAL cannot work through the core (the directory sees the
// core's connection, not the client's certificate): the core answers it
// itself, authMethodNotSupported with a diagnostic saying why, and no
// server sees it (before the fix slapd answered, after a connection the
// core opened for it). The connection stays usable and anonymous.
func TestSASLExternalAnsweredByCore(t *testing.T) {
	sl, h := twoServers(t, testbed.SlapdConfig{}, nil)
	c := h.dial(t)
	err := c.ExternalBind()
	if !ldap.IsErrorWithCode(err, ldap.LDAPResultAuthMethodNotSupported) || !strings.Contains(err.Error(), "does not work through the LDAP core") {
		t.Errorf("EXTERNAL bind: %v, want authMethodNotSupported from the core", err)
	}
	for _, s := range sl {
		if n := h.dialCount(s.Addr); n != 0 {
			t.Errorf("%s dialed %d times for an EXTERNAL bind", s.Addr, n)
		}
	}
	if got := h.targets("bind"); len(got) != 1 || got[0] != "" {
		t.Errorf("bind targets %q, want the core's own answer", got)
	}
	if err := c.Bind(alice, "alice-pw"); err != nil {
		t.Errorf("a simple bind after it: %v", err)
	}
}
