// Package cli is what the four binaries share: strict configuration loading
// (YAML file, then EDGEFLEET_* environment, then flags), the slog logger,
// exit statuses (Exit, Die) and, for the two servers, the process around
// them (Process: signals, log writer, registry, HTTP endpoints, drain;
// Listen and NoFile: their listeners and descriptor limit).
// It is the only package besides the mains that imports viper.
//
//	cfg := edgeFile{Config: relay.DefaultConfig(), Log: cli.DefaultLog()}
//	if err := cli.Load(cmd.Flags(), configPath, &cfg); err != nil { cli.Fatal("edge", err) }
//	p := cli.Start("edge", cfg.Log) // p.Log, p.Reg; see Process
//
// Keys are the `mapstructure` tags of the target struct, nested keys joined
// by "." in files and by "_" in environment variables
// (front.header_timeout ↔ EDGEFLEET_FRONT_HEADER_TIMEOUT). A flag binds to the
// key of the same name with "-" for "_" and "." (--header-timeout is not
// ambiguous because flag names are chosen per binary). Unknown keys and
// values that do not convert are errors naming the key.
package cli

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/edgefleet/edgefleet/internal/safefile"
	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// ExitConfig is the exit status for a bad configuration.
const ExitConfig = 2

// Load fills out (a pointer to a struct already holding the defaults) from
// the YAML file at path (none when empty), the environment and the changed
// flags in fs whose names map to keys (see FlagKeys).
func Load(fs *pflag.FlagSet, path string, out any) error {
	v := viper.New()
	v.SetConfigType("yaml")
	keys := map[string]reflect.Type{}
	flatten("", reflect.ValueOf(out).Elem(), func(key string, val reflect.Value) {
		keys[key] = val.Type()
		v.SetDefault(key, val.Interface())
	})
	v.SetEnvPrefix("EDGEFLEET")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	for key := range keys {
		if err := v.BindEnv(key); err != nil {
			return err
		}
	}
	if path != "" {
		data, err := safefile.Read(path, safefile.MaxConfig, nil)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			// viper's "While parsing config: yaml: line 1: …" → "yaml: line 1: …"
			msg := strings.TrimPrefix(oneLine(err).Error(), "While parsing config: ")
			return fmt.Errorf("config %s: %s", path, msg)
		}
		// Report unknown keys ourselves, naming the first: a key, or a
		// section, even an empty one (viper's own view drops those).
		var raw map[string]any
		if err := yaml.Unmarshal(data, &raw); err != nil {
			return fmt.Errorf("config %s: %w", path, oneLine(err))
		}
		if err := unknownKeys("", raw, keys); err != nil {
			return fmt.Errorf("config %s: %w", path, err)
		}
	}
	warnEnv(keys)
	if fs != nil {
		var err error
		fs.VisitAll(func(f *pflag.Flag) {
			key := strings.ReplaceAll(f.Name, "-", "_")
			if _, ok := keys[key]; ok && f.Changed && err == nil {
				err = v.BindPFlag(key, f)
			}
		})
		if err != nil {
			return err
		}
	}
	// Strict: only text converts (the environment and flags give text);
	// true is not 1 ns and 1.9 is not 1 (typeHook).
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:      out,
		ErrorUnused: true,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			durationHook,
			splitHook,
			typeHook,
			mapstructure.TextUnmarshallerHookFunc(),
		),
	})
	if err != nil {
		return err
	}
	if err := dec.Decode(v.AllSettings()); err != nil {
		return fmt.Errorf("config: %s", strings.Join(decodeErrors(err), "; "))
	}
	return nil
}

// Changed returns the keys (dotted, as in the file) whose values differ
// between a and b, two configurations of the same struct type, sorted:
// what a reload changed.
func Changed(a, b any) []string {
	va := map[string]any{}
	flatten("", reflect.ValueOf(a), func(key string, v reflect.Value) { va[key] = v.Interface() })
	var out []string
	flatten("", reflect.ValueOf(b), func(key string, v reflect.Value) {
		if !reflect.DeepEqual(va[key], v.Interface()) {
			out = append(out, key)
		}
	})
	sort.Strings(out)
	return out
}

// durationHook parses "3s"-style strings and rejects bare numbers, which
// mapstructure would otherwise read as nanoseconds.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(time.Duration(0)) {
		return data, nil
	}
	switch d := data.(type) {
	case string:
		v, err := time.ParseDuration(d)
		if err != nil {
			return nil, fmt.Errorf("bad duration %q (want e.g. 3s, 500ms)", d)
		}
		return v, nil
	case time.Duration:
		return d, nil
	case int, int64, uint64, float64:
		if reflect.ValueOf(d).IsZero() {
			return time.Duration(0), nil
		}
		return nil, fmt.Errorf("bad duration %v: give a unit (e.g. %vs)", d, d)
	}
	return nil, fmt.Errorf("%s is not a duration (want e.g. 3s, 500ms)", describe(data))
}

// splitHook turns "a,b" (how lists arrive from the environment and flags)
// into a list of any element type; the elements then convert as usual.
func splitHook(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || to.Kind() != reflect.Slice || to.Elem().Kind() == reflect.Uint8 {
		return data, nil
	}
	s := strings.TrimSpace(data.(string))
	if s == "" {
		return []string{}, nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts, nil
}

// flatten calls fn for every leaf of the struct v with its dotted key.
// Structs are descended into; durations, netip values, slices and maps are
// leaves. Embedded structs tagged ",squash" share their parent's prefix.
func flatten(prefix string, v reflect.Value, fn func(string, reflect.Value)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("mapstructure")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		fv := v.Field(i)
		if opts == "squash" || (f.Anonymous && name == "") {
			flatten(prefix, fv, fn)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		if fv.Kind() == reflect.Struct && !isLeafStruct(fv.Type()) {
			flatten(key, fv, fn)
			continue
		}
		fn(key, fv)
	}
}

// typeHook refuses every change of type but from text: mapstructure's weak
// decoding made `connect_timeout: true` 1 ns, `max_conns: 1.9` 1 and
// `ports: [true]` port 1. Text ("5", "true") converts, since the
// environment and flags give nothing else; numbers must be whole and fit.
func typeHook(from, to reflect.Type, data any) (any, error) {
	if data == nil || from == to { // e.g. a default, or a duration durationHook made
		return data, nil
	}
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return wholeNumber(data, to)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := wholeNumber(data, reflect.TypeOf(int64(0)))
		if err != nil {
			return nil, err
		}
		if n < 0 || to.Bits() < 64 && uint64(n) >= 1<<to.Bits() {
			return nil, fmt.Errorf("%s is out of range (0 to %d)", describe(data), uint64(1)<<to.Bits()-1)
		}
		return uint64(n), nil
	case reflect.Bool:
		switch d := data.(type) {
		case bool:
			return d, nil
		case string:
			if b, err := strconv.ParseBool(d); err == nil {
				return b, nil
			}
		}
		return nil, fmt.Errorf("%s is not true or false", describe(data))
	case reflect.String:
		if _, ok := data.(string); !ok {
			return nil, fmt.Errorf("%s is not a string (quote it)", describe(data))
		}
	case reflect.Slice, reflect.Array:
		if k := reflect.TypeOf(data).Kind(); k != reflect.Slice && k != reflect.Array && k != reflect.String {
			return nil, fmt.Errorf("%s is not a list", describe(data))
		}
	case reflect.Map:
		if reflect.TypeOf(data).Kind() != reflect.Map {
			return nil, fmt.Errorf("%s is not a section", describe(data))
		}
	case reflect.Struct:
		// Text goes into a leaf (a time, an address) or a section with a
		// plain form of its own (an edge's origin: "host:port").
		_, text := data.(string)
		if !(text && (isLeafStruct(to) || reflect.PointerTo(to).Implements(textUnmarshaler))) && reflect.TypeOf(data).Kind() != reflect.Map {
			return nil, fmt.Errorf("%s is not a section", describe(data))
		}
	}
	return data, nil
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// wholeNumber converts data to an integer of type to, refusing fractions,
// booleans and numbers outside to's range.
func wholeNumber(data any, to reflect.Type) (int64, error) {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if b := to.Bits(); b < 64 {
		lo, hi = -1<<(b-1), 1<<(b-1)-1
	}
	outOfRange := fmt.Errorf("%s is out of range (%d to %d)", describe(data), lo, hi)
	var n int64
	switch d := data.(type) {
	case int:
		n = int64(d)
	case int64:
		n = d
	case uint64:
		if d > math.MaxInt64 {
			return 0, outOfRange
		}
		n = int64(d)
	case float64:
		if d != math.Trunc(d) || math.IsInf(d, 0) || math.IsNaN(d) {
			return 0, fmt.Errorf("%s is not a whole number", describe(data))
		}
		if d < -(1<<63) || d >= 1<<63 {
			return 0, outOfRange
		}
		n = int64(d)
	case string:
		v, err := strconv.ParseInt(strings.TrimSpace(d), 10, 64)
		if errors.Is(err, strconv.ErrRange) {
			return 0, outOfRange
		}
		if err != nil {
			return 0, fmt.Errorf("%s is not a whole number", describe(data))
		}
		n = v
	default:
		return 0, fmt.Errorf("%s is not a whole number", describe(data))
	}
	if n < lo || n > hi {
		return 0, outOfRange
	}
	return n, nil
}

// describe renders a configuration value for an error: text quoted,
// everything else as YAML would show it.
func describe(v any) string {
	switch d := v.(type) {
	case string:
		return strconv.Quote(d)
	case map[string]any:
		return "a section"
	case []any:
		return "a list"
	case float64:
		return strconv.FormatFloat(d, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// decodeErrors turns mapstructure's errors into "key: problem" lines,
// sorted.
func decodeErrors(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		var de *mapstructure.DecodeError
		if d, ok := e.(*mapstructure.DecodeError); ok {
			de = d
		}
		switch {
		case de != nil && !isDecodeErrorList(de.Unwrap()):
			out = append(out, de.Name()+": "+problem(de.Unwrap()))
		case de != nil:
			walk(de.Unwrap())
		default:
			if j, ok := e.(interface{ Unwrap() []error }); ok {
				for _, x := range j.Unwrap() {
					walk(x)
				}
				return
			}
			if u := errors.Unwrap(e); u != nil {
				walk(u)
				return
			}
			out = append(out, oneLine(e).Error())
		}
	}
	walk(err)
	sort.Strings(out)
	return out
}

func isDecodeErrorList(err error) bool {
	if _, ok := err.(interface{ Unwrap() []error }); ok {
		return true
	}
	_, ok := err.(*mapstructure.DecodeError)
	return ok
}

// problem is the message of a decode error without mapstructure's type
// jargon where we can say it better.
func problem(err error) string {
	var ut *mapstructure.UnconvertibleTypeError
	if errors.As(err, &ut) {
		return fmt.Sprintf("%s has the wrong type (want %s)", describe(ut.Value), ut.Expected.Type())
	}
	return oneLine(err).Error()
}

// unknownKeys reports the first key of the file's YAML (keys compared
// lower-case, as viper does) that is neither a key of the target nor
// inside a section or a map-typed key of it, and a section given a value
// that is not one.
func unknownKeys(prefix string, settings map[string]any, keys map[string]reflect.Type) error {
	names := make([]string, 0, len(settings))
	for k := range settings {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		key := strings.ToLower(k)
		if prefix != "" {
			key = prefix + "." + key
		}
		val := settings[k]
		sub, isMap := val.(map[string]any)
		switch t, known := keys[key]; {
		case known:
			if isMap && t.Kind() != reflect.Map && t.Kind() != reflect.Struct {
				return fmt.Errorf("unknown key %q", key+"."+firstKey(sub))
			}
			if err := unknownElemKeys(key, val, t); err != nil {
				return err
			}
		case isPrefix(key, keys): // inside a map-typed key: free-form
		case !isSection(key, keys):
			return fmt.Errorf("unknown key %q", key)
		case val == nil: // an empty section
		case !isMap:
			return fmt.Errorf("%s: %s is not a section", key, describe(val))
		default:
			if err := unknownKeys(key, sub, keys); err != nil {
				return err
			}
		}
	}
	return nil
}

// unknownElemKeys checks the elements of a list of sections (edges:
// [{name, ipv4, …}]) like the file's top level, naming a bad key with its
// index: edges[1].ipv5.
func unknownElemKeys(key string, val any, t reflect.Type) error {
	list, ok := val.([]any)
	if !ok || t.Kind() != reflect.Slice || t.Elem().Kind() != reflect.Struct || isLeafStruct(t.Elem()) {
		return nil
	}
	for i, el := range list {
		m, ok := el.(map[string]any)
		if !ok {
			continue // not a section: the decoder says so
		}
		prefix := fmt.Sprintf("%s[%d]", key, i)
		elemKeys := map[string]reflect.Type{}
		flatten(prefix, reflect.New(t.Elem()).Elem(), func(k string, v reflect.Value) { elemKeys[k] = v.Type() })
		if err := unknownKeys(prefix, m, elemKeys); err != nil {
			return err
		}
	}
	return nil
}

func firstKey(m map[string]any) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, strings.ToLower(k))
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "*"
	}
	return names[0]
}

// isSection reports whether key is a section: some key lies below it.
func isSection(key string, keys map[string]reflect.Type) bool {
	for k := range keys {
		if strings.HasPrefix(k, key+".") {
			return true
		}
	}
	return false
}

// warnOut receives the warnings of Load (tests replace it).
var warnOut io.Writer = os.Stderr

// warnEnv writes one warning line for each EDGEFLEET_* variable that is no
// key of this binary: a misspelt one would otherwise be ignored silently.
func warnEnv(keys map[string]reflect.Type) {
	known := map[string]bool{}
	for k := range keys {
		known["EDGEFLEET_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))] = true
	}
	var unknown []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "EDGEFLEET_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		fmt.Fprintf(warnOut, "%s: warning: %s is not a configuration key: ignored\n", filepath.Base(os.Args[0]), name)
	}
}

func isLeafStruct(t reflect.Type) bool {
	switch t {
	case reflect.TypeOf(time.Time{}), reflect.TypeOf(netip.Prefix{}), reflect.TypeOf(netip.Addr{}), reflect.TypeOf(netip.AddrPort{}):
		return true
	}
	return false
}

func isPrefix(k string, keys map[string]reflect.Type) bool {
	for key, t := range keys {
		if t.Kind() == reflect.Map && strings.HasPrefix(k, key+".") {
			return true
		}
	}
	return false
}

// oneLine folds multi-error messages (mapstructure lists one per line) into
// a single line, so a bad configuration prints exactly one line.
func oneLine(err error) error {
	msg := err.Error()
	if _, rest, ok := strings.Cut(msg, "error(s):"); ok {
		msg = rest
	}
	var lines []string
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return errors.New(strings.Join(lines, "; "))
}

// Defaults returns every key of cfg (a configuration struct, as Load
// fills it) with its value, keyed as in the file: what a docs table of
// keys and defaults is checked against.
func Defaults(cfg any) map[string]any {
	out := map[string]any{}
	flatten("", reflect.ValueOf(cfg), func(key string, v reflect.Value) { out[key] = v.Interface() })
	return out
}
