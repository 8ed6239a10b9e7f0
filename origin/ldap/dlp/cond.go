package dlp

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Cond is a parsed rule condition.
type Cond interface {
	Match(c *Ctx) bool
}

// Ctx is what a condition is evaluated against. The Router normalises User
// and BaseObject itself; callers evaluating a Cond directly pass canonical
// DNs (NormalizeDN).
type Ctx struct {
	User       string // normalised DN; "" for anonymous
	Op         string // wire.OpName of the operation: bind, search, compare, add, modify, delete, modrdn, extended, ...
	BaseObject string // normalised search base, for search operations
}

// Operation names accepted by (opr.req.typ=…).
var oprTypes = []string{"bind", "search", "compare", "add", "modify", "delete", "modrdn", "extended"}

type (
	condAnd   []Cond
	condOr    []Cond
	condNot   struct{ c Cond }
	userAny   struct{}
	userAnon  struct{}
	userDN    string // canonical
	userNode  string // canonical
	userRegex struct{ re *regexp.Regexp }
	oprType   string
	baseDN    string // canonical
)

func (a condAnd) Match(c *Ctx) bool {
	for _, x := range a {
		if !x.Match(c) {
			return false
		}
	}
	return true
}

func (o condOr) Match(c *Ctx) bool {
	for _, x := range o {
		if x.Match(c) {
			return true
		}
	}
	return false
}

func (n condNot) Match(c *Ctx) bool { return !n.c.Match(c) }

// (user=*) is any identity, anonymous included.
func (userAny) Match(*Ctx) bool { return true }

func (userAnon) Match(c *Ctx) bool { return c.User == "" }

func (u userDN) Match(c *Ctx) bool { return c.User != "" && c.User == string(u) }

// (user:node=<DN>) is the node itself and every DN below it; never anonymous.
func (u userNode) Match(c *Ctx) bool { return c.User != "" && underNode(c.User, string(u)) }

// (user:regex=<RE>) is matched against the normalised DN, case-insensitively
// and unanchored (use ^ and $); anonymous has no DN and never matches.
func (u userRegex) Match(c *Ctx) bool { return c.User != "" && u.re.MatchString(c.User) }

func (o oprType) Match(c *Ctx) bool { return c.Op == string(o) }

// (search.req.baseObject=<DN>) matches search operations on exactly that base.
func (b baseDN) Match(c *Ctx) bool { return c.Op == "search" && c.BaseObject == string(b) }

// isExactDN reports whether c is a single (user=<DN>) item: such rules do
// not load-balance unless told to.
func isExactDN(c Cond) bool {
	_, ok := c.(userDN)
	return ok
}

// ParseCond parses a condition such as
// "(&(user:node=ou=staff,o=pqr)(|(opr.req.typ=add)(opr.req.typ=modify)))".
// Values run to the parenthesis that closes their item; parentheses inside
// a value must balance or be escaped with a backslash, as in a regex.
func ParseCond(s string) (Cond, error) {
	p := &condParser{s: s}
	p.space()
	if p.i == len(p.s) {
		return nil, fmt.Errorf("empty condition")
	}
	c, err := p.cond(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i < len(p.s) {
		return nil, p.errf("unexpected %s after the condition", p.found())
	}
	return c, nil
}

type condParser struct {
	s string
	i int
}

const maxCondDepth = 32

// errf reports a problem at the current character (1-based, in characters).
func (p *condParser) errf(format string, args ...any) error {
	return p.errAt(p.i, format, args...)
}

func (p *condParser) errAt(off int, format string, args ...any) error {
	return fmt.Errorf("at character %d: %s", utf8.RuneCountInString(p.s[:off])+1, fmt.Sprintf(format, args...))
}

func (p *condParser) found() string {
	if p.i >= len(p.s) {
		return "end of condition"
	}
	r, _ := utf8.DecodeRuneInString(p.s[p.i:])
	return fmt.Sprintf("%q", r)
}

func (p *condParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

func (p *condParser) expect(c byte) error {
	p.space()
	if p.i >= len(p.s) || p.s[p.i] != c {
		return p.errf("expected %q, found %s", c, p.found())
	}
	p.i++
	return nil
}

func (p *condParser) cond(depth int) (Cond, error) {
	if depth > maxCondDepth {
		return nil, p.errf("nested deeper than %d levels", maxCondDepth)
	}
	if err := p.expect('('); err != nil {
		return nil, err
	}
	p.space()
	if p.i >= len(p.s) {
		return nil, p.errf("unexpected end of condition")
	}
	var c Cond
	switch op := p.s[p.i]; op {
	case '&', '|':
		p.i++
		var list []Cond
		for {
			p.space()
			if p.i < len(p.s) && p.s[p.i] == ')' {
				break
			}
			if p.i >= len(p.s) {
				return nil, p.errf("missing ')' at the end of the condition")
			}
			sub, err := p.cond(depth + 1)
			if err != nil {
				return nil, err
			}
			list = append(list, sub)
		}
		if len(list) == 0 {
			return nil, p.errf("%q needs at least one condition", op)
		}
		if op == '&' {
			c = condAnd(list)
		} else {
			c = condOr(list)
		}
	case '!':
		p.i++
		sub, err := p.cond(depth + 1)
		if err != nil {
			return nil, err
		}
		c = condNot{sub}
	default:
		item, err := p.item()
		if err != nil {
			return nil, err
		}
		c = item
	}
	if err := p.expect(')'); err != nil {
		return nil, err
	}
	return c, nil
}

// item parses one (attr=value) condition, the '(' already read.
func (p *condParser) item() (Cond, error) {
	start := p.i
	attr, raw, vstart, err := p.attrValue()
	if err != nil {
		return nil, err
	}
	return p.itemCond(attr, raw, start, vstart)
}

// attrValue reads attr=value up to the item's closing ')', which it
// leaves unread: raw is the value as written (its parentheses balanced,
// a backslash escaping the next character), vstart where it starts.
func (p *condParser) attrValue() (attr, raw string, vstart int, err error) {
	start := p.i
	for p.i < len(p.s) && p.s[p.i] != '=' && p.s[p.i] != ')' && p.s[p.i] != '(' {
		p.i++
	}
	attr = strings.TrimSpace(p.s[start:p.i])
	if p.i >= len(p.s) || p.s[p.i] != '=' {
		return "", "", 0, p.errf("expected '=' after %q", attr)
	}
	p.i++
	vstart = p.i
	depth := 0
value:
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case '\\':
			p.i++
		case '(':
			depth++
		case ')':
			if depth == 0 {
				break value
			}
			depth--
		}
		p.i++
	}
	if p.i > len(p.s) {
		p.i = len(p.s)
	}
	if p.i >= len(p.s) {
		return "", "", 0, p.errAt(start, "item %q is not closed by ')'", strings.TrimSpace(p.s[start:]))
	}
	return attr, p.s[vstart:p.i], vstart, nil
}

// itemCond is the condition attr=raw stands for; start and vstart are
// where the item and its value start, for the errors.
func (p *condParser) itemCond(attr, raw string, start, vstart int) (Cond, error) {
	val := strings.TrimSpace(raw)
	switch strings.ToLower(attr) {
	case "user":
		switch {
		case val == "*":
			return userAny{}, nil
		case strings.EqualFold(val, "anonymous"):
			return userAnon{}, nil
		case val == "":
			return nil, p.errAt(vstart, "empty DN in (user=); write (user=anonymous) for the anonymous user")
		}
		rdns, err := parseDN(val)
		if err != nil {
			return nil, p.errAt(vstart, "invalid DN %q: %v", val, err)
		}
		return userDN(formatDN(rdns)), nil
	case "user:node":
		if val == "" {
			return nil, p.errAt(vstart, "empty DN in (user:node=)")
		}
		rdns, err := parseDN(val)
		if err != nil {
			return nil, p.errAt(vstart, "invalid DN %q: %v", val, err)
		}
		return userNode(formatDN(rdns)), nil
	case "user:regex":
		if raw == "" {
			return nil, p.errAt(vstart, "empty regular expression")
		}
		re, err := regexp.Compile("(?i)" + raw)
		if err != nil {
			return nil, p.errAt(vstart, "invalid regular expression %q: %v", raw, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
		return userRegex{re}, nil
	case "opr.req.typ":
		op := strings.ToLower(val)
		for _, t := range oprTypes {
			if op == t {
				return oprType(op), nil
			}
		}
		return nil, p.errAt(vstart, "unknown operation %q (want one of %s)", val, strings.Join(oprTypes, ", "))
	case "search.req.baseobject":
		rdns, err := parseDN(val)
		if err != nil {
			return nil, p.errAt(vstart, "invalid DN %q: %v", val, err)
		}
		return baseDN(formatDN(rdns)), nil
	}
	return nil, p.errAt(start, "unknown condition attribute %q (want user, user:node, user:regex, opr.req.typ or search.req.baseObject)", attr)
}
