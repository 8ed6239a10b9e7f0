package dlp_test

import (
	"testing"

	"github.com/edgefleet/edgefleet/origin/ldap/dlp"
)

func TestNormalizeDN(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"   ", ""},
		{"cn=admin,o=pqr", "cn=admin,o=pqr"},
		{"CN=Admin,O=PQR", "cn=admin,o=pqr"},
		{"cn = admin , o = pqr", "cn=admin,o=pqr"},
		{"  cn=admin,  o=pqr  ", "cn=admin,o=pqr"},
		{"cn=John Smith,o=pqr", "cn=john smith,o=pqr"},           // inner spaces stay
		{"cn=J\\C3\\BCrgen,o=pqr", "cn=jürgen,o=pqr"},            // hex escapes decoded
		{"cn=JÜRGEN,o=pqr", "cn=jürgen,o=pqr"},                   // Unicode case folding
		{"cn=Smith\\, John,o=pqr", "cn=smith\\, john,o=pqr"},     // escaped comma kept escaped
		{"cn=Smith\\2C John,o=pqr", "cn=smith\\, john,o=pqr"},    // hex form of the same
		{"cn=a\\+b,o=pqr", "cn=a\\+b,o=pqr"},                     // escaped plus
		{"cn=\\ lead\\ ,o=pqr", "cn=\\ lead\\ ,o=pqr"},           // escaped leading/trailing spaces kept
		{"cn=trail\\  ,o=pqr", "cn=trail\\ ,o=pqr"},              // escaped space kept, unescaped dropped
		{"cn=\\#hash,o=pqr", "cn=\\#hash,o=pqr"},                 // leading # escaped
		{"cn=a#b,o=pqr", "cn=a#b,o=pqr"},                         // inner # not
		{"cn=a\\\"q\\<\\>\\;,o=pqr", "cn=a\\\"q\\<\\>\\;,o=pqr"}, // specials
		{"cn=back\\\\slash", "cn=back\\\\slash"},
		{"cn=eq\\=ual", "cn=eq=ual"}, // '=' need not be escaped
		{"cn=ctl\\0A", "cn=ctl\\0a"},
		{"sn=B+cn=A,o=pqr", "cn=a+sn=b,o=pqr"}, // multi-valued RDN sorted
		{"cn=A + sn=B , o=pqr", "cn=a+sn=b,o=pqr"},
		{"cn=admin;o=pqr", "cn=admin,o=pqr"}, // RFC 1779 separator
		// Other names of the same attribute type (RFC 4519): long names,
		// aliases and numeric OIDs are the short name.
		{"2.5.4.3=Admin,O=PQR", "cn=admin,o=pqr"},
		{"commonName=Admin,organizationName=PQR", "cn=admin,o=pqr"},
		{"COMMONNAME=Admin,2.5.4.10=PQR", "cn=admin,o=pqr"},
		{"userid=alice,organizationalUnitName=people,domainComponent=example,DC=com", "uid=alice,ou=people,dc=example,dc=com"},
		{"0.9.2342.19200300.100.1.1=alice,2.5.4.11=people,0.9.2342.19200300.100.1.25=example", "uid=alice,ou=people,dc=example"},
		{"surname=S+givenName=G,countryName=DE,localityName=Bonn,stateOrProvinceName=NRW,streetAddress=X", "givenname=g+sn=s,c=de,l=bonn,st=nrw,street=x"},
		{"2.5.4.4=S+gn=G,rfc822Mailbox=a@b,2.5.4.12=Boss", "givenname=g+sn=s,mail=a@b,title=boss"},
		{"emailAddress=a@b,1.2.840.113549.1.9.1=c@d", "email=a@b,email=c@d"},
		{"1.2.3.4=x,unknownType=y", "1.2.3.4=x,unknowntype=y"}, // unknown: lower-cased only
		{"cn=#04024869,o=pqr", "cn=#04024869,o=pqr"},
		{"CN=#0402486A", "cn=#0402486a"},
		{"cn=,o=pqr", "cn=,o=pqr"}, // empty value is legal
		// Not DNs: lower-cased and trimmed only, never equal to a valid DN.
		{" Admin ", "admin"},
		{"cn=a,,o=pqr", "cn=a,,o=pqr"},
		{"cn=bad\\q", "cn=bad\\q"},
	}
	for _, tc := range tests {
		if got := dlp.NormalizeDN(tc.in); got != tc.want {
			t.Errorf("NormalizeDN(%q) = %q, want %q", tc.in, got, tc.want)
		}
		// Idempotent: the canonical form is its own canonical form.
		if got := dlp.NormalizeDN(dlp.NormalizeDN(tc.in)); got != tc.want {
			t.Errorf("NormalizeDN twice (%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
