package dlp

import "strings"

// Attribute descriptions in search filters are compared as slapd resolves
// them, so that a searchfilter route's prohibited attribute cannot be
// reached under another name: options dropped (uid;x-foo is uid),
// case ignored, and a known type's other names and numeric OID mapped to
// its first name (commonName and 2.5.4.3 are cn, userid is uid; the
// table is attrs_table.go). A filter on a supertype also tests its
// subtypes' values — (name=alice) matches cn: alice — so it reaches
// them too, as does an extensible match without a type
// ((:caseIgnoreMatch:=alice) tests every attribute; wire reports it as
// "").

// CanonicalAttr is the name an attribute description is compared by:
// lower case, no options, a known type's first name. "" stays "".
func CanonicalAttr(desc string) string {
	if i := strings.IndexByte(desc, ';'); i >= 0 {
		desc = desc[:i]
	}
	low := strings.ToLower(desc)
	if c, ok := attrNames[low]; ok {
		return c
	}
	if c, ok := typeNames[low]; ok {
		return c
	}
	return low
}

// reaches reports whether a filter on attribute a (canonical; "" is an
// extensible match without a type) tests the values of attribute p
// (canonical): a is p, a supertype of p, or any attribute.
func reaches(a, p string) bool {
	if a == "" {
		return true
	}
	for t, n := p, 0; t != "" && n < 16; t, n = attrSup[t], n+1 {
		if t == a {
			return true
		}
	}
	return false
}
