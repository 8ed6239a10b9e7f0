package dlp

import "testing"

// FuzzCanonical: a DN that canonical accepts is its own normal form, so
// NormalizeDN may return it unchanged.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{"", "uid=alice,ou=people,dc=example,dc=com", "cn=a-b.c_d@e,o=x1", "cn=A,o=b", "commonname=a",
		"userid=x", "cn=a+sn=b", "cn=,o=b", "cn=a,", "cn==a", "1.2.3=a", "cn=#61", "cn=a b", "cn=a\\,b", "c-=x", "c1=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dn string) {
		if canonical(dn) && normalizeDN(dn) != dn {
			t.Fatalf("canonical(%q) but its normal form is %q", dn, normalizeDN(dn))
		}
	})
}

func TestCanonical(t *testing.T) {
	for dn, want := range map[string]bool{
		"": true, "uid=alice,ou=people,dc=example,dc=com": true, "cn=a-b.c_d@e,o=x1": true,
		"cn=A,o=b": false, "commonname=a": false, "cn=a+sn=b": false, "cn=,o=b": false, "cn=a,": false, "cn=a b": false, "1.2.3=a": false,
	} {
		if got := canonical(dn); got != want {
			t.Errorf("canonical(%q) = %v, want %v", dn, got, want)
		}
		if want && normalizeDN(dn) != dn {
			t.Errorf("normalizeDN(%q) = %q", dn, normalizeDN(dn))
		}
	}
}
