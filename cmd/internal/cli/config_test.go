package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type sample struct {
	Listen  []string      `mapstructure:"listen"`
	Timeout time.Duration `mapstructure:"timeout"`
	Front   struct {
		Inner string `mapstructure:"inner"`
	} `mapstructure:"front"`
	Ports []int `mapstructure:"ports"`
	Edges []struct {
		Name string `mapstructure:"name"`
		TLS  struct {
			Cert string `mapstructure:"cert"`
		} `mapstructure:"tls"`
	} `mapstructure:"edges"`
	Log Log `mapstructure:"log"`
}

func defaults() sample {
	s := sample{Listen: []string{":636"}, Timeout: 3 * time.Second, Log: DefaultLog()}
	s.Front.Inner = "127.0.0.1:1636"
	return s
}

func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, env, wantErr string
		check                    func(sample) bool
	}{
		{name: "defaults", check: func(s sample) bool { return s.Timeout == 3*time.Second && s.Front.Inner == "127.0.0.1:1636" }},
		{name: "file", yaml: "timeout: 250ms\nfront:\n  inner: 127.0.0.1:9\nlisten: [\":1\", \":2\"]\n",
			check: func(s sample) bool {
				return s.Timeout == 250*time.Millisecond && s.Front.Inner == "127.0.0.1:9" && len(s.Listen) == 2
			}},
		{name: "env wins over file", yaml: "timeout: 1s\n", env: "EDGEFLEET_FRONT_INNER=127.0.0.1:7,EDGEFLEET_TIMEOUT=2s",
			check: func(s sample) bool { return s.Timeout == 2*time.Second && s.Front.Inner == "127.0.0.1:7" }},
		{name: "env list", env: "EDGEFLEET_LISTEN=:1;:2", check: func(s sample) bool { return len(s.Listen) == 2 }},
		{name: "env int list", env: "EDGEFLEET_PORTS=636;8636", check: func(s sample) bool { return len(s.Ports) == 2 && s.Ports[1] == 8636 }},
		{name: "bad int", yaml: "ports: [x]\n", wantErr: `ports[0]: "x" is not a whole number`},
		{name: "unknown top key", yaml: "timeout: 1s\nbogus: 1\n", wantErr: `unknown key "bogus"`},
		{name: "unknown nested key", yaml: "front:\n  innr: x\n", wantErr: `unknown key "front.innr"`},
		{name: "unknown key in a list element", yaml: "edges:\n- name: a\n- name: b\n  ipv5: x\n", wantErr: `unknown key "edges[1].ipv5"`},
		{name: "unknown nested key in a list element", yaml: "edges:\n- name: a\n  tls: {crt: x}\n", wantErr: `unknown key "edges[0].tls.crt"`},
		{name: "list elements", yaml: "edges:\n- name: a\n  tls: {cert: x}\n", check: func(s sample) bool { return len(s.Edges) == 1 && s.Edges[0].TLS.Cert == "x" }},
		{name: "bad duration", yaml: "timeout: soon\n", wantErr: `bad duration "soon"`},
		{name: "unitless duration", yaml: "timeout: 3\n", wantErr: `give a unit`},
		{name: "broken yaml", yaml: "timeout: [\n", wantErr: "c.yaml: yaml: line "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.yaml != "" {
				path = filepath.Join(t.TempDir(), "c.yaml")
				os.WriteFile(path, []byte(tc.yaml), 0o600)
			}
			if tc.env != "" {
				for _, kv := range strings.Split(tc.env, ",") {
					k, v, _ := strings.Cut(kv, "=")
					t.Setenv(k, strings.ReplaceAll(v, ";", ","))
				}
			}
			s := defaults()
			err := Load(nil, path, &s)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "decoding failed") {
					t.Fatalf("err = %v, want one line containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Fatalf("loaded %+v", s)
			}
		})
	}
}

// TestMisspeltEnvWarns: an EDGEFLEET_* variable that is no key gets one
// warning line naming it (it used to be ignored silently); known ones none.
func TestMisspeltEnvWarns(t *testing.T) {
	var out strings.Builder
	warnOut = &out
	defer func() { warnOut = os.Stderr }()
	t.Setenv("EDGEFLEET_TIMEOUTT", "1s")
	t.Setenv("EDGEFLEET_FRONT_INNER", "127.0.0.1:7")
	s := defaults()
	if err := Load(nil, "", &s); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 || !strings.HasSuffix(lines[0], ": warning: EDGEFLEET_TIMEOUTT is not a configuration key: ignored") {
		t.Fatalf("warnings %q, want one line for EDGEFLEET_TIMEOUTT", out.String())
	}
	if s.Front.Inner != "127.0.0.1:7" {
		t.Fatalf("the known variable was not applied: %+v", s)
	}
}

// TestStrictTypes: values of the wrong type are errors naming the key,
// never conversions; text from the environment still converts.
func TestStrictTypes(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"timeout: true\n", `config: timeout: true is not a duration (want e.g. 3s, 500ms)`},
		{"ports: [true]\n", `config: ports[0]: true is not a whole number`},
		{"ports: [1.5]\n", `config: ports[0]: 1.5 is not a whole number`},
		{"ports: [1e30]\n", `config: ports[0]: 1e+30 is out of range (-9223372036854775808 to 9223372036854775807)`},
		{"listen: 5\n", `config: listen: 5 is not a list`},
		{"front: 5\n", `front: 5 is not a section`},
		{"front:\n  inner: 5\n", `config: front.inner: 5 is not a string (quote it)`},
		{"fronts: {}\n", `unknown key "fronts"`},
		{"fronts:\n", `unknown key "fronts"`},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		os.WriteFile(path, []byte(tc.yaml), 0o600)
		s := defaults()
		err := Load(nil, path, &s)
		if err == nil || !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to end in %q", tc.yaml, err, tc.want)
		}
	}
	t.Setenv("EDGEFLEET_PORTS", "636,8636")
	s := defaults()
	if err := Load(nil, "", &s); err != nil || len(s.Ports) != 2 || s.Ports[1] != 8636 {
		t.Fatalf("ports from the environment: %v, %v", s.Ports, err)
	}
}

// FuzzLoad: any file either loads or fails with one line naming what is
// wrong; never a panic, never a multi-line error.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		"timeout: 250ms\nfront:\n  inner: 127.0.0.1:9\nlisten: [\":1\", \":2\"]\n",
		"timeout: true\n", "ports: [true, 1.5, 1e30, \"x\"]\n", "front: 5\n", "fronts:\n", "listen: {a: b}\n",
		"log: {format: json, level: [1]}\n", "ports: [-1]\n", "front: {inner: {x: 1}}\n",
	} {
		f.Add(seed)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, yaml string) {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		s := defaults()
		if err := Load(nil, path, &s); err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("%q: a multi-line error: %q", yaml, err)
		}
	})
}
