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
		{"2.5.4.3=Admin,O=PQR", "2.5.4.3=admin,o=pqr"},
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
