package dlp

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Distinguished names are compared in a canonical form (RFC 4514 syntax):
// attribute types and values lower-cased, spaces around '=', ',' and '+'
// removed, escapes decoded and re-encoded one way, the values of a
// multi-valued RDN sorted. "CN = J\C3\BCrgen , O=PQR" and "cn=jürgen,o=pqr"
// are the same DN.

type atv struct{ typ, val string } // val decoded, lower-cased

// NormalizeDN returns the canonical form of dn used in every comparison.
// "" (the anonymous identity) stays "". A string that is not a valid DN is
// only lower-cased and trimmed, so it can never equal a valid one (unless
// lower-casing made it valid, e.g. a Kelvin sign turning into 'k': then it
// is that DN's canonical form). NormalizeDN(NormalizeDN(x)) == NormalizeDN(x).
func NormalizeDN(dn string) string {
	rdns, err := parseDN(dn)
	if err != nil {
		low := strings.ToLower(strings.TrimSpace(dn))
		if rdns, err = parseDN(low); err != nil {
			return low
		}
	}
	return formatDN(rdns)
}

// parseDN parses an RFC 4514 string (';' accepted as ',' as in RFC 1779).
func parseDN(s string) ([][]atv, error) {
	p := &dnParser{s: s}
	p.space()
	if p.i == len(p.s) {
		return nil, nil
	}
	var rdns [][]atv
	var rdn []atv
	for {
		a, err := p.atv()
		if err != nil {
			return nil, err
		}
		rdn = append(rdn, a)
		if p.i == len(p.s) {
			return append(rdns, rdn), nil
		}
		switch p.s[p.i] {
		case '+':
			p.i++
		case ',', ';':
			p.i++
			rdns = append(rdns, rdn)
			rdn = nil
		}
	}
}

type dnParser struct {
	s string
	i int
}

func (p *dnParser) space() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *dnParser) errf(format string, args ...any) error {
	return fmt.Errorf("at character %d: %s", p.i+1, fmt.Sprintf(format, args...))
}

func (p *dnParser) atv() (atv, error) {
	p.space()
	start := p.i
	for p.i < len(p.s) && p.s[p.i] != '=' && strings.IndexByte(",;+", p.s[p.i]) < 0 {
		p.i++
	}
	typ := strings.TrimRight(p.s[start:p.i], " ")
	if p.i == len(p.s) || p.s[p.i] != '=' {
		if typ == "" {
			return atv{}, p.errf("empty RDN")
		}
		return atv{}, p.errf("missing '=' after %q", typ)
	}
	if !validType(typ) {
		return atv{}, fmt.Errorf("at character %d: invalid attribute type %q", start+1, typ)
	}
	p.i++ // '='
	p.space()
	val, err := p.value()
	if err != nil {
		return atv{}, err
	}
	return atv{typ: canonicalType(typ), val: val}, nil
}

// typeNames maps the other names of the attribute types that appear in
// DNs (RFC 4519 and the cosine and core schemas slapd ships: long names,
// aliases, numeric OIDs) to the short name, lower-cased: slapd binds
// "commonName=Alice,…" and "2.5.4.3=Alice,…" as cn=Alice,…, so a rule
// must see the same DN.
var typeNames = map[string]string{}

func init() {
	for short, others := range map[string][]string{
		"cn":                         {"commonName", "2.5.4.3"},
		"sn":                         {"surname", "2.5.4.4"},
		"serialnumber":               {"2.5.4.5"},
		"c":                          {"countryName", "2.5.4.6"},
		"l":                          {"localityName", "2.5.4.7"},
		"st":                         {"stateOrProvinceName", "2.5.4.8"},
		"street":                     {"streetAddress", "2.5.4.9"},
		"o":                          {"organizationName", "2.5.4.10"},
		"ou":                         {"organizationalUnitName", "2.5.4.11"},
		"title":                      {"2.5.4.12"},
		"description":                {"2.5.4.13"},
		"businesscategory":           {"2.5.4.15"},
		"postaladdress":              {"2.5.4.16"},
		"postalcode":                 {"2.5.4.17"},
		"postofficebox":              {"2.5.4.18"},
		"telephonenumber":            {"2.5.4.20"},
		"name":                       {"2.5.4.41"},
		"givenname":                  {"gn", "2.5.4.42"},
		"initials":                   {"2.5.4.43"},
		"generationqualifier":        {"2.5.4.44"},
		"x500uniqueidentifier":       {"2.5.4.45"},
		"dnqualifier":                {"2.5.4.46"},
		"houseidentifier":            {"2.5.4.51"},
		"uid":                        {"userid", "0.9.2342.19200300.100.1.1"},
		"mail":                       {"rfc822Mailbox", "0.9.2342.19200300.100.1.3"},
		"dc":                         {"domainComponent", "0.9.2342.19200300.100.1.25"},
		"email":                      {"emailAddress", "pkcs9email", "1.2.840.113549.1.9.1"},
		"employeenumber":             {"2.16.840.1.113730.3.1.3"},
		"displayname":                {"2.16.840.1.113730.3.1.241"},
		"uniqueidentifier":           {"0.9.2342.19200300.100.1.44"},
		"organizationalstatus":       {"0.9.2342.19200300.100.1.45"},
		"associateddomain":           {"0.9.2342.19200300.100.1.37"},
		"host":                       {"0.9.2342.19200300.100.1.9"},
		"destinationindicator":       {"2.5.4.27"},
		"registeredaddress":          {"2.5.4.26"},
		"physicaldeliveryofficename": {"2.5.4.19"},
	} {
		for _, o := range others {
			typeNames[strings.ToLower(o)] = short
		}
	}
}

// canonicalType is the name a type is compared by: its short name when
// typeNames knows it, else the name lower-cased (a numeric OID as written).
func canonicalType(typ string) string {
	low := strings.ToLower(typ)
	if short, ok := typeNames[low]; ok {
		return short
	}
	return low
}

// validType accepts a descriptor (ALPHA *(ALPHA / DIGIT / "-")) or a
// numeric OID.
func validType(t string) bool {
	if t == "" {
		return false
	}
	if t[0] >= '0' && t[0] <= '9' {
		for _, part := range strings.Split(t, ".") {
			if part == "" || strings.Trim(part, "0123456789") != "" {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(t); i++ {
		c := t[i] | 0x20
		if !(c >= 'a' && c <= 'z' || i > 0 && (t[i] >= '0' && t[i] <= '9' || t[i] == '-')) {
			return false
		}
	}
	return true
}

var errHex = errors.New("bad hex")

func unhex(c byte) (byte, error) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', nil
	case c|0x20 >= 'a' && c|0x20 <= 'f':
		return c | 0x20 - 'a' + 10, nil
	}
	return 0, errHex
}

// value reads an attribute value up to an unescaped separator, decoding
// escapes and dropping unescaped trailing spaces.
func (p *dnParser) value() (string, error) {
	if p.i < len(p.s) && p.s[p.i] == '#' { // BER-encoded value: kept as hex
		start := p.i
		p.i++
		for p.i < len(p.s) && strings.IndexByte(",;+", p.s[p.i]) < 0 && p.s[p.i] != ' ' {
			if _, err := unhex(p.s[p.i]); err != nil {
				return "", p.errf("invalid hex string")
			}
			p.i++
		}
		if (p.i-start)%2 != 1 || p.i-start == 1 {
			return "", fmt.Errorf("at character %d: invalid hex string", start+1)
		}
		v := strings.ToLower(p.s[start:p.i])
		p.space()
		return v, p.endOfValue()
	}
	var b []byte
	keep := 0 // length of b up to the last byte that is not an unescaped space
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == ',' || c == ';' || c == '+':
			return strings.ToLower(string(b[:keep])), nil
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return "", p.errf("'\\' at the end of the DN")
			}
			n := p.s[p.i+1]
			if strings.IndexByte(" \"#+,;<=>\\", n) >= 0 {
				b = append(b, n)
				p.i += 2
			} else {
				hi, err1 := unhex(n)
				var lo byte
				var err2 error = errHex
				if p.i+2 < len(p.s) {
					lo, err2 = unhex(p.s[p.i+2])
				}
				if err1 != nil || err2 != nil {
					return "", p.errf("invalid escape \\%c", n)
				}
				b = append(b, hi<<4|lo)
				p.i += 3
			}
			keep = len(b)
		default:
			b = append(b, c)
			p.i++
			if c != ' ' {
				keep = len(b)
			}
		}
	}
	return strings.ToLower(string(b[:keep])), nil
}

func (p *dnParser) endOfValue() error {
	if p.i < len(p.s) && strings.IndexByte(",;+", p.s[p.i]) < 0 {
		return p.errf("unexpected %q after a hex value", p.s[p.i])
	}
	return nil
}

func formatDN(rdns [][]atv) string {
	var b strings.Builder
	for i, rdn := range rdns {
		if i > 0 {
			b.WriteByte(',')
		}
		slices.SortFunc(rdn, func(x, y atv) int {
			if c := strings.Compare(x.typ, y.typ); c != 0 {
				return c
			}
			return strings.Compare(x.val, y.val)
		})
		for j, a := range rdn {
			if j > 0 {
				b.WriteByte('+')
			}
			b.WriteString(a.typ)
			b.WriteByte('=')
			if strings.HasPrefix(a.val, "#") && len(a.val) > 1 && isHexValue(a.val) {
				b.WriteString(a.val)
				continue
			}
			escapeValue(&b, a.val)
		}
	}
	return b.String()
}

func isHexValue(v string) bool {
	for i := 1; i < len(v); i++ {
		if _, err := unhex(v[i]); err != nil {
			return false
		}
	}
	return len(v)%2 == 1
}

// escapeValue writes v in RFC 4514 form: the specials escaped with a
// backslash, a leading '#' or space and a trailing space escaped, control
// characters as \xx.
func escapeValue(b *strings.Builder, v string) {
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case strings.IndexByte("\"+,;<>\\", c) >= 0,
			i == 0 && (c == '#' || c == ' '),
			i == len(v)-1 && c == ' ':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(b, "\\%02x", c)
		default:
			b.WriteByte(c)
		}
	}
}

// underNode reports whether the canonical DN user is node or below it.
func underNode(user, node string) bool {
	if user == node {
		return true
	}
	if node == "" {
		return user != ""
	}
	if !strings.HasSuffix(user, ","+node) {
		return false
	}
	// The ',' must be a separator, not the escaped end of a value: count
	// the backslashes before it.
	k := len(user) - len(node) - 2
	n := 0
	for ; k >= 0 && user[k] == '\\'; k-- {
		n++
	}
	return n%2 == 0
}
