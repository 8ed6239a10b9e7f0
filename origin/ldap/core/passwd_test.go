package core_test

import (
	"github.com/edgefleet/edgefleet/ldap/wire"
	ber "github.com/go-asn1-ber/asn1-ber"
	"strings"
	"testing"

	"github.com/edgefleet/edgefleet/internal/testbed"
	"github.com/go-ldap/ldap/v3"
)

// A session whose user changed their own password fails over with the
// new one. The two slapds are independent, so the test applies each
// change to L2 directly, as replication would; then L1 is killed and the
// session's next search goes to L2, re-bound with the new password
// (before the fix: the old one, invalidCredentials, unavailable). A
// change to a value the core cannot know (a hash) ends in unavailable
// saying so.
func TestPasswordChangeFailsOver(t *testing.T) {
	change := map[string]func(t *testing.T, c *ldap.Conn, pw string) string{
		"password modify": func(t *testing.T, c *ldap.Conn, pw string) string {
			if _, err := c.PasswordModify(ldap.NewPasswordModifyRequest("", "alice-pw", pw)); err != nil {
				t.Fatalf("password modify: %v", err)
			}
			return pw
		},
		"password modify generated": func(t *testing.T, c *ldap.Conn, _ string) string {
			res, err := c.PasswordModify(ldap.NewPasswordModifyRequest(alice, "", ""))
			if err != nil || res.GeneratedPassword == "" {
				t.Fatalf("password modify: %v %+v", err, res)
			}
			return res.GeneratedPassword
		},
		"modify replace": func(t *testing.T, c *ldap.Conn, pw string) string {
			m := ldap.NewModifyRequest("UID=alice, ou=people,"+testbed.Suffix, nil)
			m.Replace("userPassword", []string{pw})
			if err := c.Modify(m); err != nil {
				t.Fatalf("modify: %v", err)
			}
			return pw
		},
		"modify hashed": func(t *testing.T, c *ldap.Conn, _ string) string {
			m := ldap.NewModifyRequest(alice, nil)
			// A hashed value: its cleartext is the user's secret.
			m.Replace("userPassword", []string{"{SSHA}Ud7t2sDcBw5xNz/8m3rW5QZx3I2u2X8k"})
			if err := c.Modify(m); err != nil {
				t.Fatalf("modify: %v", err)
			}
			return ""
		},
	}
	for name, do := range change {
		t.Run(name, func(t *testing.T) {
			sl, h := twoServers(t, testbed.SlapdConfig{}, nil)
			c := boundClient(t, h)
			pw := do(t, c, "alice-new")
			if pw != "" { // replicate the change to L2
				direct := bindDirect(t, sl[1], alice, "alice-pw")
				defer direct.Close()
				if _, err := direct.PasswordModify(ldap.NewPasswordModifyRequest("", "alice-pw", pw)); err != nil {
					t.Fatal(err)
				}
			}
			sl[0].Kill()
			_, err := c.Search(ldap.NewSearchRequest(alice, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
				"(objectClass=*)", []string{"cn"}, nil))
			if pw == "" {
				if !ldap.IsErrorWithCode(err, ldap.LDAPResultUnavailable) || !strings.Contains(err.Error(), "password") {
					t.Errorf("search after L1 died: %v, want unavailable naming the password change", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("search after L1 died: %v", err)
			}
			if got := h.targets("search"); strings.Join(got, ",") != "L2" {
				t.Errorf("the search went to %v, want L2", got)
			}
		})
	}
}

// A Password Modify without a user identity changes the password of the
// request's authorization identity: with a proxied authorization control
// (RFC 4370) that is someone else. Alice, allowed to act as bob, changes
// bob's password so; her own is unchanged, and after L1 dies her session
// is re-bound on L2 with alice-pw, not bob's new password (before the
// fix: bob's, invalidCredentials, unavailable).
func TestPasswordModifyAsProxiedIdentityKeepsOwnBind(t *testing.T) {
	ldif := strings.Replace(testbed.DirectoryLDIF(0), "userPassword: alice-pw\n",
		"userPassword: alice-pw\nauthzTo: dn:"+testbed.User("bob")+"\n", 1)
	sl, h := twoServers(t, testbed.SlapdConfig{LDIF: ldif, AuthzPolicy: "to"}, nil)
	c := boundClient(t, h)
	value := ber.Encode(ber.ClassUniversal, ber.TypeConstructed, ber.TagSequence, nil, "PasswdModifyRequestValue")
	value.AppendChild(ber.NewString(ber.ClassContext, ber.TypePrimitive, 2, "bob-new", "newPasswd"))
	req := ldap.NewExtendedRequest(wire.OIDPasswdModify, value)
	req.Controls = []ldap.Control{ldap.NewControlString("2.16.840.1.113730.3.4.18", true, "dn:"+testbed.User("bob"))}
	if _, err := c.Extended(req); err != nil {
		t.Fatalf("password modify as bob: %v", err)
	}
	direct := bindDirect(t, sl[0], testbed.User("bob"), "bob-new") // bob's new password on L1
	defer direct.Close()
	sl[0].Kill()
	if _, err := c.Search(ldap.NewSearchRequest(alice, ldap.ScopeBaseObject, ldap.NeverDerefAliases, 0, 0, false,
		"(objectClass=*)", []string{"cn"}, nil)); err != nil {
		t.Fatalf("search after L1 died: %v", err)
	}
	if got := h.targets("search"); strings.Join(got, ",") != "L2" {
		t.Errorf("the search went to %v, want L2", got)
	}
}
