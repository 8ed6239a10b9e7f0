package dlp

import "testing"

func TestCanonicalAttr(t *testing.T) {
	for in, want := range map[string]string{
		"cn": "cn", "CN": "cn", "commonName": "cn", "2.5.4.3": "cn", "cn;lang-de": "cn", "CommonName;binary": "cn",
		"userid": "uid", "0.9.2342.19200300.100.1.1": "uid", "uid;x-foo": "uid",
		"rfc822Mailbox": "mail", "surname": "sn", "objectClass": "objectclass", "2.5.4.0": "objectclass",
		"x-unknown;opt": "x-unknown", "1.2.3.4": "1.2.3.4", "": "",
	} {
		if got := CanonicalAttr(in); got != want {
			t.Errorf("CanonicalAttr(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every type the DN rules know under several names is known the same way
// in filters: the two tables agree.
func TestAttrTablesAgree(t *testing.T) {
	for other, short := range typeNames {
		if got := CanonicalAttr(other); got != short {
			t.Errorf("%s: filters say %q, DNs say %q", other, got, short)
		}
		if a, ok := attrNames[other]; ok && a != short {
			t.Errorf("%s: attrNames %q, typeNames %q", other, a, short)
		}
	}
}

func TestReaches(t *testing.T) {
	for _, tc := range []struct {
		a, p string
		want bool
	}{
		{"cn", "cn", true}, {"name", "cn", true}, {"name", "sn", true}, {"", "cn", true},
		{"cn", "name", false}, {"sn", "cn", false}, {"distinguishedname", "member", true}, {"uid", "cn", false},
	} {
		if got := reaches(tc.a, tc.p); got != tc.want {
			t.Errorf("reaches(%q, %q) = %v, want %v", tc.a, tc.p, got, tc.want)
		}
	}
}
