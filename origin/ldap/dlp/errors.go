package dlp

import (
	"fmt"
	"strings"
)

// Error is one problem in a DLP file, located at a line and column (1-based,
// columns count characters) and attributed to an object and a key.
type Error struct {
	File      string
	Line, Col int
	Object    string // object type and name as written in messages: `LdapServer "LDAP1"`, `Defaults`; "" outside any object
	Key       string // "" when the problem is not one key's
	Msg       string
}

// Error formats as `ldap_proxy.json:12:5: LdapServer "LDAP1" key "port": must be 1..65535`.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Col)
	if e.Object != "" {
		b.WriteString(e.Object)
		if e.Key != "" {
			fmt.Fprintf(&b, " key %q", e.Key)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in a file, in file order.
type ErrorList []*Error

// Error is one line per error.
func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}
