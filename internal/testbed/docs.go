package testbed

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Doc returns the text of an operator document, named from the repository
// root ("docs/edge.md", "README.md"), so that a test can check the examples
// the document shows.
func Doc(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(DocPath(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// DocPath is the file name of a document named from the repository root,
// for a test that regenerates part of it (-update).
func DocPath(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, name)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the test's directory: cannot find %s", name)
		}
		dir = parent
	}
}

// DocBlocks returns the fenced code blocks of an operator document (see
// Doc) whose info string is lang ("yaml", "jsonc", "" for a bare ```), in
// order, without their fences. A document without one fails the test: the
// example the test was written for is gone.
func DocBlocks(t testing.TB, name, lang string) []string {
	t.Helper()
	var blocks []string
	var cur []string
	in, want := false, false
	for line := range strings.Lines(Doc(t, name)) {
		line = strings.TrimSuffix(line, "\n")
		switch {
		case !in && strings.HasPrefix(line, "```"):
			in, want, cur = true, strings.TrimPrefix(line, "```") == lang, nil
		case in && line == "```":
			if want {
				blocks = append(blocks, strings.Join(cur, "\n")+"\n")
			}
			in = false
		case in:
			cur = append(cur, line)
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("%s has no ```%s block", name, lang)
	}
	return blocks
}

// CheckDocDefaults checks every "| key | default | …" table of an operator
// document against the configuration a binary really loads: defaults maps
// each dotted key (as cli.Defaults returns it) to its default value, and
// prefix is put before the document's keys (docs/ldap-core.md writes
// `listen` for core.listen). A key the code does not have is an error, and
// so is a literal default (`3s`, `[":636"]`, 60, `text`) that is not the
// code's; a default described in words ("host name", "system roots") is
// not compared, except that "—", "none" and "empty" must be an empty value.
// Keys of list elements (`edges[].name`) are skipped.
func CheckDocDefaults(t testing.TB, name, prefix string, defaults map[string]any) {
	t.Helper()
	inTable := false
	for line := range strings.Lines(Doc(t, name)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) >= 2 && cells[0] == "key" && cells[1] == "default" {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(cells[0], "---") || len(cells) < 2 {
			continue
		}
		keys := docKeys(cells[0], prefix)
		vals := strings.Split(cells[1], ", ")
		for i, key := range keys {
			if strings.Contains(key, "[]") {
				continue
			}
			want, ok := defaults[key]
			if !ok {
				if !docSection(key, defaults) {
					t.Errorf("%s: key %s: the configuration has no such key", name, key)
				}
				continue
			}
			cell := ""
			switch {
			case len(vals) == len(keys):
				cell = vals[i]
			case i == 0:
				cell = cells[1]
			case len(vals) > 1 && i >= len(vals):
				cell = vals[len(vals)-1]
			case i < len(vals) && len(vals) > 1:
				cell = vals[i]
			default:
				continue
			}
			if _, ref := defaults[strings.Trim(cell, "`")]; ref {
				continue // the default is another key's value (`name`)
			}
			if msg := docDefaultMismatch(cell, want); msg != "" {
				t.Errorf("%s: key %s: the table says %s, the code's default is %s", name, key, cell, msg)
			}
		}
	}
}

// docKeys splits a key cell ("`a.b`, `.c`" or "`a` / `.b`") into full
// keys; a key written `.c` shares the previous key's parent.
func docKeys(cell, prefix string) []string {
	var keys []string
	parent := ""
	for _, f := range strings.FieldsFunc(cell, func(r rune) bool { return r == ',' || r == '/' }) {
		f = strings.TrimSpace(f)
		if !strings.HasPrefix(f, "`") || !strings.HasSuffix(f, "`") || len(f) < 3 {
			continue
		}
		k := strings.Trim(f, "`")
		if strings.HasPrefix(k, ".") {
			k = parent + k
		} else if prefix != "" {
			k = prefix + "." + k
		}
		if i := strings.LastIndex(k, "."); i >= 0 {
			parent = k[:i]
		}
		keys = append(keys, k)
	}
	return keys
}

func docSection(key string, defaults map[string]any) bool {
	for k := range defaults {
		if strings.HasPrefix(k, key+".") {
			return true
		}
	}
	return false
}

// docDefaultMismatch compares a default cell with the code's value: ""
// when they agree or the cell is a description, else the code's value.
func docDefaultMismatch(cell string, want any) string {
	rv := reflect.ValueOf(want)
	quoted := strings.Count(cell, "`") == 2 && strings.HasPrefix(cell, "`") && strings.HasSuffix(cell, "`")
	lit := strings.Trim(cell, "`")
	show := fmt.Sprintf("%v", want)
	if b, err := json.Marshal(want); err == nil && rv.Kind() == reflect.Slice {
		show = string(b)
	}
	empty := cell == "" || strings.HasPrefix(cell, "—") || cell == "none" || cell == "empty"
	if empty {
		if rv.IsZero() || (rv.Kind() == reflect.Slice || rv.Kind() == reflect.Map) && rv.Len() == 0 {
			return ""
		}
		return show
	}
	if !quoted && strings.ContainsAny(lit, " `") {
		return "" // a description
	}
	if w, ok := want.(time.Duration); ok {
		if d, err := time.ParseDuration(lit); err != nil || d != w {
			return w.String()
		}
		return ""
	}
	switch rv.Kind() {
	case reflect.Slice:
		var got any
		if err := json.Unmarshal([]byte(lit), &got); err != nil {
			return show
		}
		norm, _ := json.Marshal(got)
		if string(norm) != show {
			return show
		}
		return ""
	case reflect.String:
		if lit != rv.String() {
			return strconv.Quote(rv.String())
		}
		return ""
	}
	if lit != show {
		return show
	}
	return ""
}
