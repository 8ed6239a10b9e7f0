// Package cli is what the four binaries share: strict configuration loading
// (YAML file, then EDGEFLEET_* environment, then flags) and the slog logger.
// It is the only package besides the mains that imports viper.
//
//	cfg := edgeFile{Config: relay.DefaultConfig(), Log: cli.DefaultLog()}
//	if err := cli.Load(cmd.Flags(), configPath, &cfg); err != nil { cli.Fatal(err) }
//	log := cli.Logger(cfg.Log, os.Stderr)
//
// Keys are the `mapstructure` tags of the target struct, nested keys joined
// by "." in files and by "_" in environment variables
// (front.header_timeout ↔ EDGEFLEET_FRONT_HEADER_TIMEOUT). A flag binds to the
// key of the same name with "-" for "_" and "." (--header-timeout is not
// ambiguous because flag names are chosen per binary). Unknown keys and
// values that do not convert are errors naming the key.
package cli

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
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
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		err = v.ReadConfig(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("config %s: %w", path, oneLine(err))
		}
		// Report unknown keys ourselves, naming each.
		var unknown []string
		for _, k := range v.AllKeys() {
			if _, ok := keys[k]; !ok && !isPrefix(k, keys) {
				unknown = append(unknown, k)
			}
		}
		for k := range keys { // a scalar key given a map ("listen: {a: b}")
			if sub := v.Get(k); sub != nil {
				if _, isMap := sub.(map[string]any); isMap && keys[k].Kind() != reflect.Map && keys[k].Kind() != reflect.Struct {
					unknown = append(unknown, k+".*")
				}
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return fmt.Errorf("config %s: unknown key %q", path, unknown[0])
		}
	}
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
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result:           out,
		ErrorUnused:      true,
		WeaklyTypedInput: true,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			durationHook,
			splitHook,
			mapstructure.TextUnmarshallerHookFunc(),
		),
	})
	if err != nil {
		return err
	}
	if err := dec.Decode(v.AllSettings()); err != nil {
		return fmt.Errorf("config: %w", oneLine(err))
	}
	return nil
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
	case int, int64, float64:
		if reflect.ValueOf(d).IsZero() {
			return time.Duration(0), nil
		}
		return nil, fmt.Errorf("bad duration %v: give a unit (e.g. %vs)", d, d)
	}
	return data, nil
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
