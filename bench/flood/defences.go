package main

import (
	"fmt"
	"os/exec"
	"strings"

	"github.com/edgefleet/edgefleet/bench/internal/benchkit"
	"github.com/edgefleet/edgefleet/internal/testbed"
)

// defence is one configuration key of the defences, with its YAML for
// the defences-on and defences-off configurations ("" leaves the key out:
// the binary's default).
type defence struct {
	name  string // as the report names it: "edge limits.per_source"
	part  string // where its lines go: edge, edge.limits, front, core, core.tls
	on    string
	off   string
	probe string // what the check tries when on is "" (the default)

	available bool   // the binaries accept the key
	offOK     bool   // and its defences-off value
	note      string // why not, when not
}

// defences are every defence in the order the report lists them.
type defences []*defence

// allDefences are the defence keys of docs/edge.md and docs/origin.md. The
// defences-off values are written out (generous enough to refuse
// nothing) rather than left out, so that a build whose defaults are on
// still runs the defences-off phases without them.
func allDefences() defences {
	huge := `{conns: 1000000, rate: "1000000/s", burst: 1000000}`
	return defences{
		{name: "edge limits.per_source", part: "edge.limits",
			on: `per_source: {conns: 64, rate: "20/s", burst: 40}`, off: "per_source: " + huge},
		{name: "edge limits.per_prefix", part: "edge.limits",
			on:  `per_prefix: {v4: 24, v6: 48, conns: 512, rate: "200/s"}`,
			off: `per_prefix: {v4: 24, v6: 48, conns: 1000000, rate: "1000000/s"}`},
		{name: "edge limits.accept_rate", part: "edge.limits", on: `accept_rate: "1000/s"`, off: `accept_rate: "1000000/s"`},
		{name: "edge tls_gate", part: "edge", on: "tls_gate: {server_names: ['" + testbed.ServerName + "'], hello_timeout: 5s}"},
		{name: "front per_edge", part: "front", on: `per_edge: {conns: 1024, rate: "400/s", burst: 800}`, off: "per_edge: " + huge},
		{name: "core max_handshakes", part: "core", probe: "max_handshakes: 0", off: "max_handshakes: 100000"},
		{name: "core tls.ticket_keys", part: "core.tls", probe: "ticket_keys: 24", off: "ticket_keys: 0"},
	}
}

// String says whether the defence is in this build.
func (d *defence) String() string {
	switch {
	case !d.available:
		return fmt.Sprintf("defence %s not available in this build (%s)", d.name, d.note)
	case !d.offOK:
		return fmt.Sprintf("defence %s available; its off value was refused, the defences-off phases run with its default (%s)", d.name, d.note)
	}
	return fmt.Sprintf("defence %s available", d.name)
}

// detectDefences checks each defence's key alone, and its off value, with
// the binaries' --check.
func detectDefences(b *base) defences {
	all := allDefences()
	for _, d := range all {
		try := d.on
		if try == "" {
			try = d.probe
		}
		if err := b.check(d.part, try); err != nil {
			d.note = err.Error()
			continue
		}
		d.available = true
		d.offOK = true
		if d.off != "" {
			if err := b.check(d.part, d.off); err != nil {
				d.offOK, d.note = false, err.Error()
			}
		}
	}
	return all
}

// check runs edge --check or origin --check on a configuration holding
// lines in part; the error is the binary's first line of complaint.
func (b *base) check(part, lines string) error {
	var cfg, bin string
	if strings.HasPrefix(part, "edge") {
		bin = *edgeBin
		cfg = edgeConfig("edge-a", "127.0.0.2:1", "127.0.0.1:1", "", assemble(part, lines))
	} else {
		bin = *originBin
		var err error
		if cfg, _, err = b.originConfig("127.0.0.1:1", map[string]string{part: lines}); err != nil {
			return err
		}
	}
	path, err := benchkit.WriteConfig(b.dir, "check.yaml", cfg)
	if err != nil {
		return err
	}
	outb, err := exec.Command(bin, "--config", path, "--check").CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(outb))
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if msg == "" {
		msg = err.Error()
	}
	return fmt.Errorf("%s", msg)
}

// value is d's lines for the configuration (on or off), "" when the
// build does not have it.
func (d *defence) value(on bool) string {
	switch {
	case !d.available:
		return ""
	case on:
		return d.on
	case d.offOK:
		return d.off
	}
	return ""
}

// edgeYAML is the edges' defence keys, top-level YAML lines.
func (ds defences) edgeYAML(on bool) string {
	var top, limits []string
	for _, d := range ds {
		v := d.value(on)
		switch {
		case v == "":
		case d.part == "edge":
			top = append(top, v)
		case d.part == "edge.limits":
			limits = append(limits, v)
		}
	}
	return assemble("edge", strings.Join(top, "\n")) + assemble("edge.limits", strings.Join(limits, "\n"))
}

// originYAML is the origin's defence keys by section (front, core,
// core.tls).
func (ds defences) originYAML(on bool) map[string]string {
	m := map[string]string{}
	for _, d := range ds {
		if v := d.value(on); v != "" && !strings.HasPrefix(d.part, "edge") {
			m[d.part] += v + "\n"
		}
	}
	return m
}

// assemble is lines as top-level YAML of the edge's configuration: under
// limits: for edge.limits.
func assemble(part, lines string) string {
	if lines == "" {
		return ""
	}
	if part == "edge.limits" {
		return "limits:\n" + indent(lines, 2)
	}
	return indent(lines, 0)
}

// list names the available defences, or says none is.
func (ds defences) list(available bool) string {
	var names []string
	for _, d := range ds {
		if d.available == available {
			names = append(names, "`"+d.name+"`")
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
