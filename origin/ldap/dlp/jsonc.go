package dlp

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The DLP file is JSON with // and /* */ comments. encoding/json neither
// accepts comments nor reports where a value was, so this is a small parser
// that keeps the offset of every key and value for error messages.

// node is a parsed JSON value.
type node struct {
	kind byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	pos  int  // byte offset of the value's first character
	str  string
	num  float64
	text string // a number as written
	b    bool
	arr  []*node
	obj  []member
}

type member struct {
	key    string
	keyPos int
	val    *node
}

func (n *node) kindName() string {
	switch n.kind {
	case 'o':
		return "an object"
	case 'a':
		return "an array"
	case 's':
		return "a string"
	case 'n':
		return "a number"
	case 'b':
		return "a boolean"
	}
	return "null"
}

// syntaxError is a fatal problem at a byte offset.
type syntaxError struct {
	off int
	msg string
}

// stripComments blanks out comments, rune for rune, keeping newlines, so
// that every line and column (counted in characters) is where it was.
// Offsets into the result, not into src, are what position converts. On
// error the result is the text up to the problem followed by the rest of
// src, and the error's offset is in it.
func stripComments(src string) (string, *syntaxError) {
	var b strings.Builder
	b.Grow(len(src))
	blank := func(s string) {
		for _, r := range s {
			if r == '\n' || r == '\r' {
				b.WriteRune(r)
			} else {
				b.WriteByte(' ')
			}
		}
	}
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == '"':
			j := i + 1
			for j < len(src) && src[j] != '"' && src[j] != '\n' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			if j < len(src) && src[j] == '"' {
				j++
			}
			j = min(j, len(src))
			b.WriteString(src[i:j]) // an unterminated string is the parser's to report
			i = j
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				j = len(src) - i
			}
			blank(src[i : i+j])
			i += j
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			j := strings.Index(src[i+2:], "*/")
			if j < 0 {
				off := b.Len()
				b.WriteString(src[i:])
				return b.String(), &syntaxError{off, "unterminated /* comment"}
			}
			blank(src[i : i+2+j+2])
			i += 2 + j + 2
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), nil
}

type jsonParser struct {
	s     string
	i     int
	depth int
}

// parseJSON parses one JSON value filling the whole of s (comments
// already blanked).
func parseJSON(s string) (*node, *syntaxError) {
	p := &jsonParser{s: s}
	p.space()
	n, err := p.value()
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i < len(p.s) {
		return nil, p.errf("unexpected %s after the top-level array", p.found())
	}
	return n, nil
}

func (p *jsonParser) errf(format string, args ...any) *syntaxError {
	return &syntaxError{p.i, fmt.Sprintf(format, args...)}
}

func (p *jsonParser) found() string {
	if p.i >= len(p.s) {
		return "end of file"
	}
	r, _ := utf8.DecodeRuneInString(p.s[p.i:])
	return strconv.QuoteRune(r)
}

func (p *jsonParser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

const maxJSONDepth = 64

func (p *jsonParser) value() (*node, *syntaxError) {
	if p.i >= len(p.s) {
		return nil, p.errf("unexpected end of file, expected a value")
	}
	switch c := p.s[p.i]; {
	case c == '{' || c == '[':
		if p.depth++; p.depth > maxJSONDepth {
			return nil, p.errf("nested deeper than %d levels", maxJSONDepth)
		}
		defer func() { p.depth-- }()
		if c == '{' {
			return p.object()
		}
		return p.array()
	case c == '"':
		pos := p.i
		s, err := p.string()
		return &node{kind: 's', pos: pos, str: s}, err
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case strings.HasPrefix(p.s[p.i:], "true"):
		p.i += 4
		return &node{kind: 'b', pos: p.i - 4, b: true}, nil
	case strings.HasPrefix(p.s[p.i:], "false"):
		p.i += 5
		return &node{kind: 'b', pos: p.i - 5}, nil
	case strings.HasPrefix(p.s[p.i:], "null"):
		p.i += 4
		return &node{kind: 'z', pos: p.i - 4}, nil
	}
	return nil, p.errf("unexpected %s, expected a value", p.found())
}

func (p *jsonParser) object() (*node, *syntaxError) {
	n := &node{kind: 'o', pos: p.i}
	p.i++
	p.space()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return n, nil
	}
	for {
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			if p.i < len(p.s) && p.s[p.i] == '}' {
				return nil, p.errf("trailing comma before '}'")
			}
			return nil, p.errf("unexpected %s, expected a quoted key", p.found())
		}
		keyPos := p.i
		key, err := p.string()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, p.errf("unexpected %s, expected ':' after key %q", p.found(), key)
		}
		p.i++
		p.space()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		n.obj = append(n.obj, member{key: key, keyPos: keyPos, val: v})
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return n, nil
		}
		return nil, p.errf("unexpected %s, expected ',' or '}' after the value of %q", p.found(), key)
	}
}

func (p *jsonParser) array() (*node, *syntaxError) {
	n := &node{kind: 'a', pos: p.i}
	p.i++
	p.space()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return n, nil
	}
	for {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			return nil, p.errf("trailing comma before ']'")
		}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		n.arr = append(n.arr, v)
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return n, nil
		}
		return nil, p.errf("unexpected %s, expected ',' or ']' in an array", p.found())
	}
}

func (p *jsonParser) string() (string, *syntaxError) {
	start := p.i
	j := p.i + 1
	for {
		if j >= len(p.s) || p.s[j] == '\n' {
			return "", &syntaxError{start, "unterminated string"}
		}
		c := p.s[j]
		if c == '"' {
			break
		}
		if c < 0x20 {
			return "", &syntaxError{j, "control character in a string"}
		}
		if c == '\\' {
			j++
		}
		j++
	}
	raw := p.s[start : j+1]
	p.i = j + 1
	if !strings.ContainsRune(raw, '\\') {
		return raw[1 : len(raw)-1], nil
	}
	var s string
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return "", &syntaxError{start, "invalid escape in string"}
	}
	return s, nil
}

func (p *jsonParser) number() (*node, *syntaxError) {
	start := p.i
	j := p.i
	for j < len(p.s) && strings.IndexByte("+-0123456789.eE", p.s[j]) >= 0 {
		j++
	}
	text := p.s[start:j]
	var f float64
	if err := json.Unmarshal([]byte(text), &f); err != nil {
		return nil, &syntaxError{start, fmt.Sprintf("invalid number %q", text)}
	}
	p.i = j
	return &node{kind: 'n', pos: start, num: f, text: text}, nil
}

// position converts a byte offset of s into a 1-based line and column;
// columns count characters (an invalid UTF-8 byte counts as one).
func position(s string, off int) (line, col int) {
	off = min(off, len(s))
	line = 1 + strings.Count(s[:off], "\n")
	ls := strings.LastIndexByte(s[:off], '\n') + 1
	return line, utf8.RuneCountInString(s[ls:off]) + 1
}

// latin1ToUTF8 decodes ISO 8859-1: every byte is the code point of the same
// value.
func latin1ToUTF8(b []byte) string {
	var sb strings.Builder
	sb.Grow(len(b) + len(b)/8)
	for _, c := range b {
		sb.WriteRune(rune(c))
	}
	return sb.String()
}
