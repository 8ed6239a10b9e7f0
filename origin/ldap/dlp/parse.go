package dlp

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/edgefleet/edgefleet/internal/safefile"
)

// ParseFile reads and parses a DLP file, a regular file of at most
// safefile.MaxConfig bytes (safefile.Read: a FIFO or a device is refused
// at once). A file that cannot be opened is an *fs.PathError
// (errors.Is(err, fs.ErrNotExist) when it is missing: the core then runs
// in plain mode); a file with problems is an ErrorList.
func ParseFile(path string) (*File, error) {
	data, err := safefile.Read(path, safefile.MaxConfig, nil)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse parses the contents of a DLP file; path is used in error messages.
// The error, when not nil, is an ErrorList with every problem found, one
// per line, in file order. A JSON syntax error stops parsing, so it is the
// only error reported.
func Parse(path string, data []byte) (*File, error) {
	text := strings.TrimPrefix(string(data), "\ufeff")
	stripped, root, serr := parseText(text)
	if serr != nil {
		return nil, ErrorList{syntaxErr(path, stripped, serr)}
	}
	if codeSet(root) == 0 {
		// Latin-1 file: convert all of it and parse again. Positions do not
		// move: every byte was one character and still is.
		text = latin1ToUTF8([]byte(text))
		if stripped, root, serr = parseText(text); serr != nil {
			return nil, ErrorList{syntaxErr(path, stripped, serr)}
		}
	} else if !utf8.ValidString(text) {
		off := 0
		for off < len(text) {
			r, n := utf8.DecodeRuneInString(text[off:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			off += n
		}
		return nil, ErrorList{syntaxErr(path, text, &syntaxError{off, `invalid UTF-8; a Latin-1 file needs "JSONCodeSet": 0 in its Defaults object`})}
	}
	b := &builder{path: path, text: stripped, f: &File{
		Path:      path,
		Defaults:  DefaultDefaults(),
		Servers:   map[string]*Server{},
		Rules:     map[string]*Rule{},
		Balancers: map[string]*Balancer{},
	}}
	b.file(root)
	if len(b.errs) > 0 {
		sort.SliceStable(b.errs, func(i, j int) bool {
			x, y := b.errs[i], b.errs[j]
			return x.Line < y.Line || x.Line == y.Line && x.Col < y.Col
		})
		return nil, b.errs
	}
	return b.f, nil
}

// parseText strips comments and parses; offsets in the result (and in the
// error) are offsets in the returned stripped text.
func parseText(text string) (string, *node, *syntaxError) {
	stripped, err := stripComments(text)
	if err != nil {
		return stripped, nil, err
	}
	root, err := parseJSON(stripped)
	return stripped, root, err
}

func syntaxErr(path, text string, e *syntaxError) *Error {
	line, col := position(text, e.off)
	return &Error{File: path, Line: line, Col: col, Msg: "syntax error: " + e.msg}
}

// codeSet finds Defaults.JSONCodeSet before anything else is interpreted;
// 1 when absent or not a plain 0.
func codeSet(root *node) int {
	if root.kind != 'a' {
		return 1
	}
	for _, o := range root.arr {
		if o.kind != 'o' || o.get("object") == nil || o.get("object").str != "Defaults" {
			continue
		}
		if v := o.get("JSONCodeSet"); v != nil && v.kind == 'n' && v.num == 0 {
			return 0
		}
	}
	return 1
}

func (n *node) get(key string) *node {
	for _, m := range n.obj {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// Object types and their keys, exactly as spelled in the file.
var objectKeys = map[string][]string{
	"Defaults":     {"object", "ConnectTimeout", "OfflineRetryTimeout", "MonitorInterval", "JSONCodeSet", "Tracing"},
	"LdapServer":   {"object", "name", "host", "port", "ssl"},
	"LdapProxy":    {"object", "name", "rules", "default"},
	"ProxyRule":    {"object", "ruleType", "name", "condition", "actions", "loadbalance", "failover", "keepconn"},
	"LoadBalancer": {"object", "name", "algorithm", "routes", "switchback", "precision", "threshold", "alert"},
}

var objectTypes = []string{"Defaults", "LdapServer", "LdapProxy", "ProxyRule", "LoadBalancer"}

// Load balancing algorithms (docs/balancers.md).
var algorithms = []string{"failover", "optimal", "proportional", "saturation", "searchfilter"}

type builder struct {
	path string
	text string // the file without comments: offsets are into it
	f    *File
	errs ErrorList

	defaultsAt int              // offset of the Defaults object, -1 when none yet
	seen       map[string]int   // "<type>\x00<name>" → offset of the first object
	proxyRules map[*Proxy]*node // rules key, resolved after every rule is known
	proxyDef   map[*Proxy]*node
	ruleAction map[*Rule]*node
	routeAt    map[*Route]routePos // where each route's server and capacity are written
}

// obj is the object being read, for error attribution.
type obj struct {
	b     *builder
	typ   string
	name  string
	n     *node
	where string // `LdapServer "LDAP1"`
}

func (b *builder) errAt(off int, object, key, format string, args ...any) {
	line, col := position(b.text, off)
	b.errs = append(b.errs, &Error{File: b.path, Line: line, Col: col, Object: object, Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (o *obj) keyErr(key, format string, args ...any) {
	off := o.n.pos
	for _, m := range o.n.obj {
		if m.key == key {
			off = m.keyPos
			break
		}
	}
	o.b.errAt(off, o.where, key, format, args...)
}

func (o *obj) objErr(format string, args ...any) { o.b.errAt(o.n.pos, o.where, "", format, args...) }

func (b *builder) file(root *node) {
	b.defaultsAt = -1
	b.seen = map[string]int{}
	b.proxyRules = map[*Proxy]*node{}
	b.proxyDef = map[*Proxy]*node{}
	b.ruleAction = map[*Rule]*node{}
	b.routeAt = map[*Route]routePos{}
	if root.kind != 'a' {
		b.errAt(root.pos, "", "", "the file must be a JSON array of objects, found %s", root.kindName())
		return
	}
	for i, n := range root.arr {
		if n.kind != 'o' {
			b.errAt(n.pos, "", "", "element %d of the array must be an object, found %s", i+1, n.kindName())
			continue
		}
		o := &obj{b: b, n: n}
		t := n.get("object")
		switch {
		case t == nil:
			b.errAt(n.pos, "", "", `object without an "object" key (want one of %s)`, strings.Join(objectTypes, ", "))
			continue
		case t.kind != 's' || objectKeys[t.str] == nil:
			b.errAt(keyPos(n, "object"), "", "object", "unknown object type %s (want one of %s)", show(t), strings.Join(objectTypes, ", "))
			continue
		}
		o.typ = t.str
		o.where = o.typ
		if nm := n.get("name"); nm != nil && nm.kind == 's' && nm.str != "" {
			o.name = nm.str
			o.where = fmt.Sprintf("%s %q", o.typ, o.name)
		}
		if !o.checkKeys() {
			continue
		}
		switch o.typ {
		case "Defaults":
			o.defaults()
		case "LdapServer":
			o.server()
		case "LdapProxy":
			o.proxy()
		case "ProxyRule":
			o.rule()
		case "LoadBalancer":
			o.balancer()
		}
	}
	b.resolve()
}

func keyPos(n *node, key string) int {
	for _, m := range n.obj {
		if m.key == key {
			return m.keyPos
		}
	}
	return n.pos
}

// show quotes a value for a message.
func show(n *node) string {
	switch n.kind {
	case 's':
		return fmt.Sprintf("%q", n.str)
	case 'n':
		return n.text
	case 'b':
		return fmt.Sprint(n.b)
	}
	return n.kindName()
}

// checkKeys reports unknown and duplicate keys; false when the object is
// unusable (no name where one is required).
func (o *obj) checkKeys() bool {
	known := objectKeys[o.typ]
	seen := map[string]bool{}
	for _, m := range o.n.obj {
		if seen[m.key] {
			o.b.errAt(m.keyPos, o.where, m.key, "duplicate key")
			continue
		}
		seen[m.key] = true
		if slices.Contains(known, m.key) {
			continue
		}
		hint := ""
		for _, k := range known {
			if strings.EqualFold(k, m.key) {
				hint = fmt.Sprintf(" (did you mean %q?)", k)
			}
		}
		o.b.errAt(m.keyPos, o.where, m.key, "unknown key%s", hint)
	}
	if o.typ == "Defaults" {
		return true
	}
	nm := o.n.get("name")
	switch {
	case nm == nil:
		o.objErr(`missing key "name"`)
		return false
	case nm.kind != 's' || nm.str == "":
		o.keyErr("name", "must be a non-empty string")
		return false
	case o.typ != "LdapProxy" && strings.ContainsAny(nm.str, "(), \t"):
		o.keyErr("name", "must not contain parentheses, commas or spaces (it is used in actions and rule lists)")
		return false
	}
	id := o.typ + "\x00" + nm.str
	if first, ok := o.b.seen[id]; ok {
		line, _ := position(o.b.text, first)
		o.keyErr("name", "duplicate %s name (first defined on line %d)", o.typ, line)
		return false
	}
	o.b.seen[id] = o.n.pos
	return true
}

// number reads a numeric key; ok is false when absent or invalid (reported).
func (o *obj) number(key string) (v float64, present, ok bool) {
	n := o.n.get(key)
	if n == nil {
		return 0, false, false
	}
	if n.kind != 'n' {
		o.keyErr(key, "must be a number, found %s", show(n))
		return 0, true, false
	}
	return n.num, true, true
}

func (o *obj) integer(key string, lo, hi int) (v int, present, ok bool) {
	f, present, ok := o.number(key)
	if !ok {
		return 0, present, false
	}
	if f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		o.keyErr(key, "must be an integer %d..%d, found %s", lo, hi, o.n.get(key).text)
		return 0, true, false
	}
	return int(f), true, true
}

// flag reads a 0/1 key (true/false accepted too).
func (o *obj) flag(key string, def bool) bool {
	n := o.n.get(key)
	switch {
	case n == nil:
		return def
	case n.kind == 'b':
		return n.b
	case n.kind == 'n' && (n.num == 0 || n.num == 1):
		return n.num == 1
	}
	o.keyErr(key, "must be 0 or 1, found %s", show(n))
	return def
}

func (o *obj) str(key string, required bool) (string, bool) {
	n := o.n.get(key)
	if n == nil {
		if required {
			o.objErr("missing key %q", key)
		}
		return "", false
	}
	if n.kind != 's' {
		o.keyErr(key, "must be a string, found %s", show(n))
		return "", false
	}
	return n.str, true
}

// seconds reads a duration in seconds (fractions allowed).
func (o *obj) seconds(key string, dst *time.Duration, allowZero bool) {
	f, present, ok := o.number(key)
	if !present || !ok {
		return
	}
	const maxSeconds = 86400
	d := time.Duration(f * float64(time.Second))
	switch {
	case f < 0 || f > maxSeconds:
		o.keyErr(key, "must be 0..%d seconds, found %s", maxSeconds, o.n.get(key).text)
	case d == 0 && !allowZero:
		// f below a nanosecond is 0 too: a MonitorInterval of 0 would
		// panic the monitor's ticker, a ConnectTimeout fail every connect.
		o.keyErr(key, "must be greater than 0")
	default:
		*dst = d
	}
}

func (o *obj) defaults() {
	b := o.b
	if b.defaultsAt >= 0 {
		line, _ := position(b.text, b.defaultsAt)
		o.objErr("duplicate Defaults object (first on line %d)", line)
		return
	}
	b.defaultsAt = o.n.pos
	d := &b.f.Defaults
	if f, present, ok := o.number("ConnectTimeout"); present && ok && f == 0 {
		o.keyErr("ConnectTimeout", "must be greater than 0 (0 would leave the core unable to connect)")
	} else {
		o.seconds("ConnectTimeout", &d.ConnectTimeout, false)
	}
	o.seconds("OfflineRetryTimeout", &d.OfflineRetryTimeout, true)
	o.seconds("MonitorInterval", &d.MonitorInterval, false)
	if v, present, ok := o.integer("JSONCodeSet", 0, 1); present && ok {
		d.JSONCodeSet = v
	}
	if v, present, ok := o.integer("Tracing", 0, 3); present && ok {
		d.Tracing = v
	}
}

func (o *obj) server() {
	s := &Server{Name: o.name, Port: 389}
	if host, ok := o.str("host", true); ok {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if host == "" || strings.ContainsAny(host, " \t/") {
			o.keyErr("host", "must be a host name or an IP address, found %q", host)
		}
		s.Host = host
	}
	if v, present, ok := o.integer("port", 1, 65535); present && ok {
		s.Port = v
	}
	s.SSL = o.flag("ssl", false)
	s.SSLAt.Line, s.SSLAt.Col = position(o.b.text, keyPos(o.n, "ssl"))
	o.b.f.Servers[s.Name] = s
	o.b.f.ServerOrder = append(o.b.f.ServerOrder, s.Name)
}

func (o *obj) proxy() {
	p := &Proxy{Name: o.name}
	o.b.f.Proxies = append(o.b.f.Proxies, p)
	if n := o.n.get("rules"); n != nil {
		o.b.proxyRules[p] = n
	}
	if n := o.n.get("default"); n != nil {
		o.b.proxyDef[p] = n
	}
}

func (o *obj) rule() {
	r := &Rule{Name: o.name}
	if t, ok := o.str("ruleType", true); ok {
		switch t {
		case UserRouting, OperationRouting:
			r.Type = t
		default:
			o.keyErr("ruleType", "must be %q or %q, found %q", UserRouting, OperationRouting, t)
		}
	}
	if c, ok := o.str("condition", true); ok {
		r.ConditionText = c
		cond, err := ParseCond(c)
		if err != nil {
			o.keyErr("condition", "%v", err)
		}
		r.Condition = cond
	}
	if n := o.n.get("actions"); n == nil {
		o.objErr(`missing key "actions"`)
	} else {
		o.b.ruleAction[r] = n
	}
	r.Failover = o.flag("failover", true)
	// An exact-DN rule names one user: round robin would only spread that
	// user's connections, so it is off unless asked for (seed 000).
	r.LoadBalance = o.flag("loadbalance", r.Type == UserRouting && r.Condition != nil && !isExactDN(r.Condition))
	if o.n.get("keepconn") != nil && r.Type == UserRouting {
		o.keyErr("keepconn", "applies to OperationRouting rules only")
	}
	r.KeepConn = o.flag("keepconn", false)
	o.b.f.Rules[r.Name] = r
	o.b.f.RuleOrder = append(o.b.f.RuleOrder, r.Name)
}

func (o *obj) balancer() {
	lb := &Balancer{Name: o.name}
	if a, ok := o.str("algorithm", true); ok {
		if !slices.Contains(algorithms, a) {
			o.keyErr("algorithm", "unknown algorithm %q (want one of %s)", a, strings.Join(algorithms, ", "))
		} else {
			lb.Algorithm = a
		}
	}
	o.balancerKeys(lb)
	o.b.f.Balancers[lb.Name] = lb
}

// resolve checks references once every object is known (objects may refer
// to ones defined later in the file).
func (b *builder) resolve() {
	for _, name := range b.f.RuleOrder {
		r := b.f.Rules[name]
		n := b.ruleAction[r]
		if n == nil {
			continue
		}
		o := &obj{b: b, typ: "ProxyRule", name: r.Name, where: fmt.Sprintf("ProxyRule %q", r.Name)}
		if n.kind != 'a' || len(n.arr) != 1 || n.arr[0].kind != 's' {
			b.errAt(n.pos, o.where, "actions", `must be an array with one action, "forwardto(S1,S2,…)" or "balance(LB)"`)
			continue
		}
		b.action(o, r, n.arr[0])
	}
	for _, p := range b.f.Proxies {
		where := fmt.Sprintf("LdapProxy %q", p.Name)
		if n, ok := b.proxyRules[p]; ok {
			names := b.nameList(n, where, "rules", "ProxyRule", func(s string) bool { return b.f.Rules[s] != nil })
			for _, s := range names {
				p.Rules = append(p.Rules, b.f.Rules[s])
			}
		} else {
			for _, s := range b.f.RuleOrder {
				p.Rules = append(p.Rules, b.f.Rules[s])
			}
		}
		if n, ok := b.proxyDef[p]; ok {
			p.Default = b.nameList(n, where, "default", "LdapServer", func(s string) bool { return b.f.Servers[s] != nil })
		}
	}
	b.resolveRoutes()
}

// nameList reads an array of names that must exist and appear once.
func (b *builder) nameList(n *node, where, key, what string, exists func(string) bool) []string {
	if n.kind != 'a' {
		b.errAt(n.pos, where, key, "must be an array of %s names, found %s", what, n.kindName())
		return nil
	}
	var out []string
	for _, e := range n.arr {
		switch {
		case e.kind != 's':
			b.errAt(e.pos, where, key, "must be an array of %s names, found %s", what, show(e))
		case !exists(e.str):
			b.errAt(e.pos, where, key, "no %s named %q", what, e.str)
		case slices.Contains(out, e.str):
			b.errAt(e.pos, where, key, "%q is listed twice", e.str)
		default:
			out = append(out, e.str)
		}
	}
	return out
}

// action parses forwardto(S1,S2,…) or balance(LB).
func (b *builder) action(o *obj, r *Rule, n *node) {
	s := strings.TrimSpace(n.str)
	open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || close != len(s)-1 || close < open {
		b.errAt(n.pos, o.where, "actions", `invalid action %q (want "forwardto(S1,S2,…)" or "balance(LB)")`, n.str)
		return
	}
	verb := strings.TrimSpace(s[:open])
	var args []string
	for _, a := range strings.Split(s[open+1:close], ",") {
		args = append(args, strings.TrimSpace(a))
	}
	switch strings.ToLower(verb) {
	case "forwardto":
		var list []string
		for _, a := range args {
			switch {
			case a == "":
				b.errAt(n.pos, o.where, "actions", "empty server name in %q", n.str)
			case b.f.Servers[a] == nil:
				b.errAt(n.pos, o.where, "actions", "no LdapServer named %q", a)
			case slices.Contains(list, a):
				b.errAt(n.pos, o.where, "actions", "server %q is listed twice", a)
			default:
				list = append(list, a)
			}
		}
		r.Forward = list
	case "balance":
		switch {
		case len(args) != 1 || args[0] == "":
			b.errAt(n.pos, o.where, "actions", "balance() takes one LoadBalancer name, found %q", n.str)
		case b.f.Balancers[args[0]] == nil:
			b.errAt(n.pos, o.where, "actions", "no LoadBalancer named %q", args[0])
		default:
			r.Balance = args[0]
		}
	default:
		b.errAt(n.pos, o.where, "actions", `unknown action %q (want "forwardto(S1,S2,…)" or "balance(LB)")`, verb)
	}
}
