package dlp_test

import (
	"testing"

	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
)

func TestCondMatch(t *testing.T) {
	admin := dlp.Ctx{User: "cn=admin,o=pqr", Op: "bind"}
	staff := dlp.Ctx{User: "cn=jo,ou=staff,o=pqr", Op: "add"}
	anon := dlp.Ctx{Op: "search", BaseObject: "cn=config"}
	node := dlp.Ctx{User: "ou=staff,o=pqr", Op: "search", BaseObject: "o=pqr"}
	tricky := dlp.Ctx{User: `cn=x\,ou=staff,o=pqr`, Op: "bind"} // one RDN under o=pqr, not under ou=staff
	tests := []struct {
		cond string
		ctx  dlp.Ctx
		want bool
	}{
		{"(user=cn=admin,o=pqr)", admin, true},
		{"(user=CN=Admin, O=PQR)", admin, true},
		{"( user = cn=admin,o=pqr )", admin, true},
		{"(user=cn=admin,o=pqr)", staff, false},
		{"(user=cn=admin,o=pqr)", anon, false},
		{"(user=*)", admin, true},
		{"(user=*)", anon, true},
		{"(user=anonymous)", anon, true},
		{"(user=Anonymous)", anon, true},
		{"(user=anonymous)", admin, false},
		{"(user:node=ou=staff,o=pqr)", staff, true},
		{"(user:node=OU=Staff,O=pqr)", staff, true},
		{"(user:node=ou=staff,o=pqr)", node, true}, // the node itself
		{"(user:node=ou=staff,o=pqr)", admin, false},
		{"(user:node=ou=staff,o=pqr)", anon, false},
		{"(user:node=ou=staff,o=pqr)", tricky, false},
		{"(user:node=o=pqr)", tricky, true},
		{"(user:regex=^cn=adm)", admin, true},
		{"(user:regex=^CN=ADM)", admin, true}, // case-insensitive
		{"(user:regex=admin)", admin, true},   // unanchored
		{"(user:regex=^cn=(jo|al),ou=staff)", staff, true},
		{"(user:regex=^cn=x\\)$)", dlp.Ctx{User: "cn=x)"}, true}, // an escaped paren is the regex's, not the item's end
		{"(user:regex=.*)", anon, false},                         // anonymous has no DN
		{"(opr.req.typ=bind)", admin, true},
		{"(opr.req.typ=ADD)", staff, true},
		{"(opr.req.typ=add)", admin, false},
		{"(search.req.baseObject=cn=config)", anon, true},
		{"(search.req.baseobject=CN=Config)", anon, true},
		{"(search.req.baseObject=cn=config)", admin, false},
		{"(search.req.baseObject=)", dlp.Ctx{Op: "search"}, true}, // root DSE
		{"(search.req.baseObject=)", dlp.Ctx{Op: "bind"}, false},
		{"(&(user:node=o=pqr)(opr.req.typ=add))", staff, true},
		{"(&(user:node=o=pqr)(opr.req.typ=add))", admin, false},
		{"(|(user=anonymous)(opr.req.typ=add))", staff, true},
		{"(|(user=anonymous)(opr.req.typ=add))", admin, false},
		{"(!(user=anonymous))", admin, true},
		{"(!(user=anonymous))", anon, false},
		{" ( & (user:node=o=pqr) ( ! (opr.req.typ=bind) ) ) ", staff, true},
		{"(&(|(user=cn=admin,o=pqr)(user:node=ou=staff,o=pqr))(!(opr.req.typ=search)))", admin, true},
		{"(user=cn=f(x),o=pqr)", dlp.Ctx{User: "cn=f(x),o=pqr"}, true}, // balanced parens in a DN
		{"(user=cn=J\\C3\\BCrgen,o=pqr)", dlp.Ctx{User: "cn=jürgen,o=pqr"}, true},
	}
	for _, tc := range tests {
		c, err := dlp.ParseCond(tc.cond)
		if err != nil {
			t.Errorf("ParseCond(%q): %v", tc.cond, err)
			continue
		}
		if got := c.Match(&tc.ctx); got != tc.want {
			t.Errorf("%s on %+v = %v, want %v", tc.cond, tc.ctx, got, tc.want)
		}
	}
}

func TestCondErrors(t *testing.T) {
	tests := []struct{ cond, want string }{
		{"", "empty condition"},
		{"user=x", `at character 1: expected '(', found 'u'`},
		{"(user=cn=a,o=b", `at character 2: item "user=cn=a,o=b" is not closed by ')'`},
		{"(user=cn=a)(user=cn=b)", `at character 12: unexpected '(' after the condition`},
		{"(&)", `at character 3: '&' needs at least one condition`},
		{"(|)", `at character 3: '|' needs at least one condition`},
		{"(!)", `at character 3: expected '(', found ')'`},
		{"(!(user=*)(user=*))", `at character 11: expected ')', found '('`},
		{"(usr=cn=a)", `at character 2: unknown condition attribute "usr" (want user, user:node, user:regex, opr.req.typ or search.req.baseObject)`},
		{"(user)", `at character 6: expected '=' after "user"`},
		{"(user=)", `at character 7: empty DN in (user=); write (user=anonymous) for the anonymous user`},
		{"(user=admin)", `at character 7: invalid DN "admin": at character 6: missing '=' after "admin"`},
		{"(user=cn=a,,o=b)", `at character 7: invalid DN "cn=a,,o=b": at character 6: empty RDN`},
		{"(user=c n=a)", `at character 7: invalid DN "c n=a": at character 1: invalid attribute type "c n"`},
		{"(user=cn=a\\x)", `at character 7: invalid DN "cn=a\\x": at character 5: invalid escape \x`},
		{"(user:node=)", `at character 12: empty DN in (user:node=)`},
		{"(user:regex=)", `at character 13: empty regular expression`},
		{"(user:regex=[a)", "at character 13: invalid regular expression \"[a\": missing closing ]: `[a`"},
		{"(opr.req.typ=unbind)", `at character 14: unknown operation "unbind" (want one of bind, search, compare, add, modify, delete, modrdn, extended)`},
		{"(search.req.baseObject=o)", `at character 24: invalid DN "o": at character 2: missing '=' after "o"`},
		{"(user=cn=Jürgen,o=x)(", `at character 21: unexpected '(' after the condition`}, // characters, not bytes
	}
	for _, tc := range tests {
		_, err := dlp.ParseCond(tc.cond)
		if err == nil {
			t.Errorf("ParseCond(%q) accepted", tc.cond)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("ParseCond(%q)\n got: %s\nwant: %s", tc.cond, err, tc.want)
		}
	}
}
