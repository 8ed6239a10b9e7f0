package dlp

import "errors"

// Cond is a parsed rule condition.
type Cond interface {
	Match(c *Ctx) bool
}

// Ctx is what a condition is evaluated against.
type Ctx struct {
	User       string // normalised DN (NormalizeDN); "" for anonymous
	Op         string // wire.OpName of the operation
	BaseObject string // normalised search base, for search operations
}

// ParseCond parses a condition such as "(&(user:node=o=pqr)(opr.req.typ=add))".
func ParseCond(s string) (Cond, error) {
	return nil, errors.New("not implemented")
}

// NormalizeDN returns the canonical form of a DN used for every comparison.
func NormalizeDN(dn string) string { return dn }
